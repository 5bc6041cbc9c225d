/*
 * Reading one line of the user's Python source, as recorded in a trace's
 * frames: which variable a line changes in place, whether it names a
 * variable, whether it assigns one. Heuristics on text, never evaluation.
 * Internal to the inspector; every function takes any NUL-terminated text
 * and cannot fail. What gt__py_target and gt__py_written copy out is a
 * piece of the line: a buffer of strlen(code) + 1 bytes always holds it.
 */
#ifndef GT_INSPECTOR_PYSRC_H
#define GT_INSPECTOR_PYSRC_H

#include <stddef.h>

#include "strbuf.h"

/* 1 if `name` occurs in `code` as a whole identifier (not as part of a
 * longer name, nor as an attribute "x.name"), else 0. */
int gt__py_mentions(const char *code, const char *name);

/* Where `call` (a name and its parenthesis: "save_for_backward(",
 * "Dropout(") first occurs in `code` as a whole name: not right after an
 * identifier character ("nn.Dropout(" holds "Dropout(", "MyDropout(" does
 * not). NULL if nowhere. */
const char *gt__py_call(const char *code, const char *call);

/* The variable a line changes in place: "w -= ...", "w[0] = ...",
 * "w.add_(...)", "self.w *= ...", "torch.relu_(w)", "F.relu(w, inplace=True)"
 * give "w" / "self.w". Writes it to buf ("" if the line is not of that
 * form or the name does not fit in len bytes). */
void gt__py_target(const char *code, char *buf /* OUT */, size_t len);

/* The expression a line changes in place, as written, subscripts and all:
 * "v1[0].add_(1)", "x[:, 1].mul_(2)", "torch.relu_(m.w[0])",
 * "F.relu(x[:, 1], inplace=True)", "self.w[0] *= 2", "m.weight[0] = 0" give
 * "v1[0]", "x[:, 1]", "m.w[0]", "x[:, 1]", "self.w[0]", "m.weight[0]".
 * Writes it to buf ("" if the line is not of that form or it does not fit
 * in len bytes). */
void gt__py_written(const char *code, char *buf /* OUT */, size_t len);

/* Read Python source from q, counting brackets into *depth (string
 * literals' do not count): up to the bracket that brings *depth back to 0
 * when stop is set, else up to the end of the text or its comment ('#').
 * Returns where it stopped. */
const char *gt__py_brackets(const char *q, int *depth, int stop);

/* 1 if the line assigns `name` as a whole ("name = ...", also as one of
 * the targets of "a, name = ..."), else 0. */
int gt__py_assigns(const char *code, const char *name);

/* 1 if `name` is an attribute path ("self.fc.weight", "model.w"), 0 for a
 * plain variable. */
int gt__py_is_attribute(const char *name);

/* Cut a trailing comment ("x.add_(1)  # note" -> "x.add_(1)") in place,
 * with the spaces before it; '#' inside a string literal is kept. */
void gt__py_strip_comment(char *code);

/* A code line without its indentation and trailing comment, in place.
 * Can't fail. */
void gt__py_trim_code(gt_strbuf *code);

/* The out-of-place form of an in-place line: "x.clamp_(min=0)" gives
 * "x = x.clamp(min=0)", "x += y" gives "x = x + (y)"; "" when the line is
 * of neither form. Into out (emptied first); out of memory sets out's
 * sticky flag. */
void gt__py_out_of_place_line(const char *code, const char *name, gt_strbuf *out);

/* The line without its ".detach()" (or ".data", not ".data_ptr") into out
 * (emptied first); returns which it dropped ("detach()", ".data"), NULL
 * (out empty) if neither is there. */
const char *gt__py_without_alias(const char *code, gt_strbuf *out);

/* `code` (a DistributedDataParallel(...) or DDP(...) line ending in its
 * ')') with find_unused_parameters=True added, into out (emptied first);
 * -1 (out empty) when the line is not of that form or out ran out of
 * memory. */
int gt__py_ddp_fixed_line(const char *code, gt_strbuf *out);

/* The module path of a dotted parameter name ("aux" of "aux.weight", ""
 * for the root module's own or NULL) into out (emptied first). */
void gt__py_module_of(const char *name, gt_strbuf *out);

#endif
