/* UTF-8 decoding; see utf8.h. */
#include "utf8.h"

size_t gt_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* range of the second byte */

    if (c < 0x80) {
        if (cp)
            *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    if (cp) {
        uint32_t v = len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
        for (size_t i = 1; i < len; i++)
            v = v << 6 | (s[i] & 0x3f);
        *cp = v;
    }
    return len;
}

size_t gt_utf8_width(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            n++;
    return n;
}
