/*
 * Integer lists as the trace stores them (tensors.shape, tensors.strides)
 * and as the readers hand them to SQLite's json_each: a JSON array of
 * integers, "[16,8]". One encoder and one decoder for every side.
 */
#ifndef GT_COMMON_INTLIST_H
#define GT_COMMON_INTLIST_H

#include <stddef.h>
#include <stdint.h>

/* Bytes gt_ints_format may write for n integers: "[", n * "-digits,", "]",
 * NUL. */
#define GT_INTS_ROOM(n) (3 + (size_t)(n)*21)

/* Write "[v0,v1,...]" and a NUL into buf (GT_INTS_ROOM(n) bytes); returns
 * the length without the NUL. Can't fail. */
size_t gt_ints_format(char *buf, const int64_t *v, size_t n);

/* The same, malloc'd (free() it); NULL when out of memory. */
char *gt_ints_json(const int64_t *v, size_t n);

/* Parse a JSON array of integers ("[16, 8]", spaces allowed) into v (room
 * for max); returns the count, or -1 if s is NULL, not such an array, or
 * holds more than max. */
int gt_ints_parse(const char *s, int64_t *v, int max);

#endif
