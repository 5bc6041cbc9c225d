/* gt_strerror (include/gradtrace/error.h), generated from GT_ERRNO_MAP: in
 * common/, so the recorder, the inspector and the adapters all have it. */
#include <gradtrace/error.h>

const char *gt_strerror(int code)
{
    switch (code) {
#define GT__ERRNO_CASE(name, value, msg)                                                 \
    case value:                                                                          \
        return msg;
        GT_ERRNO_MAP(GT__ERRNO_CASE)
#undef GT__ERRNO_CASE
    }
    return "unknown error";
}
