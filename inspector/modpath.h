/*
 * Module paths (stacks.module, schema v5): which nn.Module ran a line, by
 * its path in the model ("layer3.1", "blocks.4.attn"), for diagnose's
 * locations and the graph's labels. A trace before v5 has none: every
 * function here then answers "none".
 */
#ifndef GT_INSPECTOR_MODPATH_H
#define GT_INSPECTOR_MODPATH_H

#include <stddef.h>
#include <stdint.h>

#include <gradtrace/error.h>

#include "strbuf.h"
#include <gradtrace/trace.h>

/* The module path of stack `stack`: with innermost = 0, of its location
 * (the frame gt_trace_loc names): the module whose method holds that line,
 * else the innermost module that called it (a function a forward called);
 * with innermost = 1, the innermost module of the whole stack (the op's
 * own: "layer3.1.conv2"). Malloc'd into *out: "" for the outermost module
 * called (the model itself), NULL for none. Returns 0, or a negative GT_E*
 * code with the message on t (*out NULL). */
GT_WARN_UNUSED int gt_trace_stack_module(gt_trace *t, int64_t stack, int innermost,
                                         char **out /* OUT */);

/* *json, a location object (gt_loc.json), with "module" set to the module
 * path of stack's location when it has a non-empty one: *json is replaced
 * (the old one freed) or left as it is. Returns 0, or a negative GT_E* code
 * with the message on t (*json left as it is). */
GT_WARN_UNUSED int gt_loc_json_add_module(gt_trace *t, int64_t stack, char **json);

/* The n module paths as one short text appended to *out: the path when all
 * are equal; when they differ only in one numeric component, that component
 * as a range or a set ("blocks.0–5", "layer1.{0,1}", "h.{0,2,4}.mlp");
 * else nothing. Returns 1 when it appended, 0 when not; a failed allocation
 * sets out->oom. */
int gt_module_span(const char *const *paths, size_t n, gt_strbuf *out);

#endif
