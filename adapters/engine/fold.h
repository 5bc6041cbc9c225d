/*
 * fold: turns the shim's capture records (gt_capture.h) into recorder calls
 * (gradtrace/recorder.h), off the training thread.
 *
 * One fold reads every lane of the capture, merging lanes by stamp, and
 * gives each engine address a trace id: a tensor is the same tensor while
 * its TensorImpl keeps the same version counter and storage; an op's output
 * that is not one of its inputs is always a new tensor (its address may be
 * a dead tensor's); a version counter or storage first met on a new output
 * is new. Versions: the value before the op is read at its start, the value
 * after from a kept copy of the counter; a change is a bump of that op (one
 * per counter), a change between ops an observed bump.
 *
 * A background thread drains the lanes every `period_ms` milliseconds and
 * the recorder commits at most batch_ms later, so after a kill -9 what was
 * captured up to period_ms + batch_ms before is in the file.
 *
 * Memory: the maps hold one entry per live-ish address (an address reused by
 * a new tensor replaces its entry), plus one per distinct op, node class,
 * slot and stack.
 */
#ifndef GRADTRACE_FOLD_H
#define GRADTRACE_FOLD_H

#include <gradtrace/recorder.h>

typedef struct gt_fold gt_fold;

/* A fold writing to r (not owned); windowed: r cuts windows (keep_last),
 * so rows a cut dropped are written again. Returns 0, GT_ENOMEM. */
int gt_fold_new(gt_recorder *r, int windowed, gt_fold **out /* OUT */);

/* Start the background thread, draining every period_ms (> 0). */
int gt_fold_start(gt_fold *f, unsigned period_ms);

/* Fold everything published so far, on the calling thread. Returns the
 * recorder's first error, or 0. */
int gt_fold_drain(gt_fold *f);

/* Fold what was captured, then let go of the entry of the tensor at impl
 * and of its weak reference (torch.utils.swap_tensors refuses a tensor
 * with one): it is recorded anew when next seen. */
void gt_fold_forget_tensor(gt_fold *f, const void *impl);

/* The version counter vc of the tensor at impl was set, not bumped
 * (torch._C._autograd._unsafe_set_version_counter): record the value it
 * has now as an observed bump, after what was captured before it. */
void gt_fold_observe_version(gt_fold *f, const void *impl, const void *vc,
                             uint32_t version);

/* Stop the background thread (if any), drain, and free. Accepts NULL. */
void gt_fold_free(gt_fold *f);

/* The fold is in a forked child: free memory without touching anything. */
void gt_fold_forget(gt_fold *f);

#endif
