/*
 * Whether a recording holds a trace: the recorder takes an exclusive
 * flock(2) on the trace file for as long as it records (recorder.c); the
 * inspector and a second recorder probe it.
 */
#ifndef GT_COMMON_TRACELOCK_H
#define GT_COMMON_TRACELOCK_H

/* 1 if another open file description (a recording, in this process or
 * another) holds the flock of the file at `path`, else 0 (no such file
 * included). Probe it before SQLite opens the file: closing a descriptor of
 * a file drops this process's POSIX locks on it, SQLite's included. Can't
 * fail. */
int gt_trace_is_live(const char *path);

#endif
