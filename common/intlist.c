/* Integer lists as JSON arrays; see intlist.h. */
#include "intlist.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* "00" .. "99": two digits at a time */
static const char pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930"
    "31323334353637383940414243444546474849505152535455565758596061"
    "62636465666768697071727374757677787980818283848586878889909192"
    "93949596979899";

/* Write x's decimal digits at p; returns how many. */
static size_t put_digits(char *p, uint64_t x)
{
    if (x < 10) {
        *p = (char)('0' + x);
        return 1;
    }
    size_t d = 2;
    for (uint64_t top = 100; d < 20 && x >= top; top *= 10)
        d++;
    char *e = p + d;
    for (; x >= 100; x /= 100) {
        e -= 2;
        memcpy(e, pairs + 2 * (x % 100), 2);
    }
    if (x >= 10)
        memcpy(e - 2, pairs + 2 * x, 2);
    else
        e[-1] = (char)('0' + x);
    return d;
}

size_t gt_ints_format(char *buf, const int64_t *v, size_t n)
{
    size_t k = 0;
    buf[k++] = '[';
    for (size_t i = 0; i < n; i++) {
        if (i)
            buf[k++] = ',';
        if (v[i] < 0)
            buf[k++] = '-';
        k += put_digits(buf + k, v[i] < 0 ? 0 - (uint64_t)v[i] : (uint64_t)v[i]);
    }
    buf[k++] = ']';
    buf[k] = '\0';
    return k;
}

char *gt_ints_json(const int64_t *v, size_t n)
{
    char *s = malloc(GT_INTS_ROOM(n));
    if (s)
        gt_ints_format(s, v, n);
    return s;
}

int gt_ints_parse(const char *s, int64_t *v, int max)
{
    int n = 0;
    if (!s || *s != '[')
        return -1;
    s++;
    for (;;) {
        while (isspace((unsigned char)*s) || *s == ',')
            s++;
        if (*s == ']')
            return n;
        char *end;
        long long x = strtoll(s, &end, 10);
        if (end == s || n == max)
            return -1;
        v[n++] = x;
        s = end;
    }
}
