/*
 * The diagnosis report: what `gradtrace diagnose` prints, built as data
 * by the library so that every user (the command, the multi-rank report,
 * the graph's focus, the Python extension) reads the same report.
 *
 * A report holds the findings of gt_diagnose (diagnose.h), each as its
 * JSON document (the `diagnose --json` contract: SQLite's JSON functions
 * build every value), findings at one site merged into one ("repeats"),
 * the whole document, and the exit status the command gives. The text a
 * person reads is made from the documents (gt_report_text), never from the
 * findings again, so the text and the JSON cannot disagree.
 *
 * Every function returning int returns 0 or a negative GT_E* code with a
 * one-line message on the trace handle (gt_trace_errmsg); out-parameters
 * are written only on success.
 */
#ifndef GT_INSPECTOR_REPORT_H
#define GT_INSPECTOR_REPORT_H

#include <sqlite3.h>
#include <stddef.h>

#include <gradtrace/diagnose.h>
#include <gradtrace/graph.h>
#include <gradtrace/multi.h>
#include "strbuf.h"
#include <gradtrace/trace.h>

typedef struct gt_report {
    gt_findings *findings; /* gt_diagnose's, owned */
    char *doc;             /* the `diagnose --json` document, owned */
    char *error;           /* the run's last error as JSON, NULL if none; owned */
    char **docs;           /* each finding's document, merged (ndocs of them) */
    size_t ndocs;
    gt_strbuf broken; /* what does not fit together in the trace, "" if all does */
    int status;       /* the command's exit status: 1 findings (an unexplained
                       * error alone in a damaged trace: 2), 2 none in a damaged
                       * trace, 0 none */
} gt_report;

/* Diagnose t (opts as gt_diagnose takes them) and build its report into
 * *out; `name` is the trace as the user named it (the document's "trace").
 * Returns 0, or a negative GT_E* code with the message on t ("cannot read
 * trace: ..." for a query that failed); *out is then empty (release it
 * anyway: it accepts an empty report). */
GT_WARN_UNUSED int gt_report_build(gt_trace *t, const char *name,
                                   const gt_diagnose_options *opts,
                                   gt_report *out /* OUT */);

/* The text report (what `gradtrace diagnose` prints) of r into out,
 * appended; color: ANSI colours. Returns 0, or GT_ENOMEM with "out of
 * memory" on t (out then holds nothing of it). */
GT_WARN_UNUSED int gt_report_text(gt_trace *t, const gt_report *r, const char *name,
                                  int color, gt_strbuf *out /* OUT */);

/* Free what r holds and empty it; accepts an empty report. */
void gt_report_release(gt_report *r);

/* `diagnose --json` in one call: the document of gt_report_build appended
 * to out and the exit status into *status. Same failures. */
GT_WARN_UNUSED int gt_diagnose_json(gt_trace *t, const char *name,
                                    const gt_diagnose_options *opts, gt_strbuf *out,
                                    int *status /* OUT */);

/* The report of the traces of `set` (the ranks of a distributed run),
 * each diagnosed on its own: docs[i] the `diagnose --json` document of
 * set->v[i] ("" when it could not be diagnosed) and codes[i] its exit
 * status (above 1: not diagnosed). Each rank's outcome and every distinct
 * finding (gt_finding_key_sql) once with the ranks it was found on, and
 * the notes likewise: as JSON ({"traces", "groups", "notes"}) when json is
 * set, else as text; appended to out. Returns 0, or GT_ENOMEM (out then
 * holds nothing of it) (report_multi.c). */
GT_WARN_UNUSED int gt_multi_report(const gt_rank_set *set, char **docs, const int *codes,
                                   int json, gt_strbuf *out /* OUT */);

/* For each of fs's findings, into lead[i] (fs->n entries), the index of
 * the first of the findings with the same site (gt_finding_site_key_sql:
 * diagnose prints them as one, "repeated N times"). 0, or GT_ENOMEM /
 * GT_ESQL. */
GT_WARN_UNUSED int gt_findings_same(gt_trace *t, const gt_findings *fs,
                                    size_t *lead /* OUT */);

/* Build the graph of t as `gradtrace graph` draws it: centred on the
 * findings of gt_diagnose (opts->backward), those at one site counted once
 * (gt_findings_same); opts->findings and opts->finding_lead are set here
 * and cleared before returning. A trace the diagnosis cannot read is drawn
 * without findings, "cannot diagnose, drawing without findings: <why>" and
 * a newline appended to notes. Returns 0 and the graph in *out, or a
 * negative GT_E* code with the message on t. */
GT_WARN_UNUSED int gt_graph_build_focused(gt_trace *t, gt_graph_options *opts,
                                          gt_graph **out /* OUT */, gt_strbuf *notes);

/* SQL (one parameter: a finding's JSON document, one row, one column) giving
 * the finding's identity: what its text says, without row ids. Two findings
 * with the same identity say the same thing. */
extern const char gt_finding_key_sql[];

/* The same for a finding's site: its identity but for the versions (the
 * version saved, the writes' versions, the fix's wording). Findings with one
 * site are one finding repeated, diagnose prints them once. */
extern const char gt_finding_site_key_sql[];

/* The notes a diagnosis carries besides its findings, read from its JSON
 * document `doc` with SQLite's JSON functions on `db` (any connection):
 * GT_NOTE_COMPILED, the line saying torch.compile'd code ran eagerly while
 * recording (none if it did not); GT_NOTE_OUTSIDE, one line per backward
 * call that ran nodes whose forward ran before recording started. Each
 * line is terminal-safe text without "note: " and newline. Returns 0 with
 * *lines (malloc'd, free with gt_diagnose_notes_free) and *n, or -1 when
 * out of memory (or SQLite fails) with *lines NULL and *n 0. */
enum { GT_NOTE_COMPILED, GT_NOTE_OUTSIDE };
int gt_diagnose_notes(sqlite3 *db, const char *doc, int which, char ***lines /* OUT */,
                      size_t *n /* OUT */);
void gt_diagnose_notes_free(char **lines, size_t n);

#endif
