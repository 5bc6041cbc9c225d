/*
 * gradtrace result codes, shared by the recorder and the inspector: 0 on
 * success, a negative GT_E* value on failure. The enum and gt_strerror()'s
 * messages come from one list, GT_ERRNO_MAP (libuv's UV_ERRNO_MAP).
 */
#ifndef GRADTRACE_ERROR_H
#define GRADTRACE_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define GT_WARN_UNUSED __attribute__((warn_unused_result))
#else
#define GT_WARN_UNUSED
#endif

/* Error codes: X(name, value, message). gt_strerror() is generated from it. */
#define GT_ERRNO_MAP(X)                                                                  \
    X(GT_OK, 0, "success")                                                               \
    X(GT_EINVAL, -1, "invalid argument")                                                 \
    X(GT_ENOMEM, -2, "out of memory")                                                    \
    X(GT_EIO, -3, "i/o error")                                                           \
    X(GT_EEXIST, -4, "file exists")                                                      \
    X(GT_ENOTTRACE, -5, "not a gradtrace trace")                                         \
    X(GT_ENEWER, -6, "trace schema is newer than this gradtrace")                        \
    X(GT_EFULL, -7, "disk full or size limit reached")                                   \
    X(GT_ECLOSED, -8, "handle is closed")                                                \
    X(GT_EFAILED, -9, "recording stopped after an earlier error")                        \
    X(GT_ESQL, -10, "sqlite error")                                                      \
    X(GT_ECORRUPT, -11, "trace is damaged")                                              \
    X(GT_EBUSY, -12, "trace is held open by another process")

enum gt_errno {
#define GT__ERRNO_ENUM(name, value, msg) name = value,
    GT_ERRNO_MAP(GT__ERRNO_ENUM)
#undef GT__ERRNO_ENUM
};

/* The static message for a result code; never NULL, "unknown error" for an
 * unknown code (common/strerror.c). */
const char *gt_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif
