/*
 * Text from a trace, made safe for a terminal: see termtext.h.
 */
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"
#include <gradtrace/termtext.h>
#include "utf8.h"

/* 1 for the invisible characters that change the order in which text is
 * shown (Unicode bidirectional controls): printed as they are, they can make
 * a source line read differently from what it is ("Trojan Source"). */
static int is_bidi_control(uint32_t cp)
{
    return cp == 0x061c || cp == 0x200e || cp == 0x200f ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/* Call emit(ctx, bytes, len) for each piece of the sanitized text. */
typedef void (*emit_fn)(void *ctx, const char *p, size_t n);

static void sanitize(const char *s, size_t n, emit_fn emit, void *ctx)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0; /* run: start of the pending plain bytes */

    while (i < n) {
        unsigned char c = p[i];
        uint32_t cp = 0;
        size_t len = gt_utf8_next(p + i, n - i, &cp);
        char esc[8];
        size_t elen;

        if (len == 1 && c >= 0x20 && c != 0x7f) {
            i++;
            continue;
        }
        if (len > 1 && cp > 0x9f && !is_bidi_control(cp)) {
            i += len;
            continue;
        }
        /* something to escape: flush the plain run first */
        if (i > run)
            emit(ctx, s + run, i - run);
        if (len > 1) { /* C1 control (U+0080..U+009F) or bidi control: \uNNNN */
            memcpy(esc, "\\u", 2);
            for (int k = 0; k < 4; k++)
                esc[2 + k] = hex[cp >> (12 - 4 * k) & 15];
            elen = 6;
            i += len;
        } else {
            if (c == '\t')
                memcpy(esc, "\\t", elen = 2);
            else if (c == '\n')
                memcpy(esc, "\\n", elen = 2);
            else if (c == '\r')
                memcpy(esc, "\\r", elen = 2);
            else {
                esc[0] = '\\';
                esc[1] = 'x';
                esc[2] = hex[c >> 4];
                esc[3] = hex[c & 15];
                elen = 4;
            }
            i++;
        }
        emit(ctx, esc, elen);
        run = i;
    }
    if (i > run)
        emit(ctx, s + run, i - run);
}

static void emit_file(void *ctx, const char *p, size_t n)
{
    fwrite(p, 1, n, (FILE *)ctx);
}

void gt_term_putn(FILE *f, const char *s, size_t n)
{
    if (s)
        sanitize(s, n, emit_file, f);
}

void gt_term_puts(FILE *f, const char *s)
{
    if (s)
        sanitize(s, strlen(s), emit_file, f);
}

static void emit_buf(void *ctx, const char *p, size_t n)
{
    (void)gt_strbuf_add(ctx, p, n); /* ->oom says if it failed */
}

char *gt_term_text(const char *s)
{
    gt_strbuf b = {0};
    if (!s)
        s = "";
    size_t n = strlen(s);
    sanitize(s, n, emit_buf, &b);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (!b.p)
        return strdup("");
    return b.p;
}
