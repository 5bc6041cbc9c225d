/* gt_strerror, generated from GT_ERRNO_MAP. */
#include <gradtrace/recorder.h>

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
