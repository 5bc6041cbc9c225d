/*
 * The fingerprint of a saved tensor, as both adapters take it (the
 * saved_fingerprints rows): XXH3 (libxxhash) over the bytes of the view's
 * own elements, in memory order (its dimensions sorted by decreasing
 * stride, a reversed one read forward, a broadcast one read once). The
 * bytes between them are never read: a [4,16] chunk with strides [48,1]
 * hashes its 64 elements, not the neighbouring chunks a later in-place op
 * may write. A contiguous view, or a permutation of one (a transposed
 * weight), is hashed as the one run of memory it is.
 *
 * GT_FP_FULL reads every element. GT_FP_SAMPLED reads at most
 * GT_FP_BUDGET bytes: every element of a view that small, else GT_FP_RUNS
 * runs of consecutive elements (in that order) spread evenly from the
 * first element to the last, both included. The elements read depend only
 * on the geometry and the itemsize, so the fingerprint taken at save and
 * the one taken at use of the same view read the same elements and
 * compare. A view of at most GT_FP_BUDGET bytes hashes the same in both
 * modes.
 *
 * Each adapter calls gt_fp_view with what it reads off the tensor; the
 * function touches no torch or Python object, allocates nothing for views
 * of up to 16 dimensions (malloc above), and is safe to call from any
 * thread.
 */
#ifndef GT_COMMON_FINGERPRINT_H
#define GT_COMMON_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How saved tensors are fingerprinted (run.options.check_saved names it). */
enum { GT_FP_OFF = 0, GT_FP_SAMPLED = 1, GT_FP_FULL = 2 };

#define GT_FP_BUDGET 4096 /* bytes a sampled fingerprint reads at most */
#define GT_FP_RUNS   64   /* runs of elements it reads them in */

/* The fingerprint, in `mode`, of the view whose first element (index 0 in
 * every dimension) is at `data`, of `ndim` dimensions with `sizes` and
 * `strides` (in elements, any sign, 0 for a broadcast dimension) and
 * `itemsize` bytes per element, into *hash (OUT). Returns the number of
 * bytes read (0 for a view with no element, *hash then 0), or -1 with
 * *hash unchanged for a mode that reads nothing, an itemsize of 0, a
 * negative size or ndim, data NULL with elements, or no memory for a view
 * of more than 16 dimensions. */
int64_t gt_fp_view(const void *data, size_t itemsize, int ndim, const int64_t *sizes,
                   const int64_t *strides, int mode, uint64_t *hash);

/* The mode named `name` ("sampled", "full", "off"), -1 for another. */
int gt_fp_mode_parse(const char *name);

/* The name of `mode` ("sampled", "full", "off"); "off" for another. */
const char *gt_fp_mode_name(int mode);

#ifdef __cplusplus
}
#endif

#endif
