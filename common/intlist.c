/* Integer lists as JSON arrays; see intlist.h. */
#include "intlist.h"

#include <ctype.h>
#include <stdlib.h>

size_t gt_ints_format(char *buf, const int64_t *v, size_t n)
{
    size_t k = 0;
    buf[k++] = '[';
    for (size_t i = 0; i < n; i++) {
        char tmp[24];
        int t = 0;
        uint64_t x = v[i] < 0 ? 0 - (uint64_t)v[i] : (uint64_t)v[i];
        if (i)
            buf[k++] = ',';
        if (v[i] < 0)
            buf[k++] = '-';
        do {
            tmp[t++] = (char)('0' + x % 10);
            x /= 10;
        } while (x);
        while (t)
            buf[k++] = tmp[--t];
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
