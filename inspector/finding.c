/* The finding kinds' names and families (diagnose.h), made from the one
 * list GT_FINDING_KINDS, and the cut reasons' names. */
#include <stdlib.h>
#include <string.h>

#include <gradtrace/finding.h>

#define NAME_CASE(name, value, json, family, printer)                                    \
    case GT_FINDING_##name:                                                              \
        return json;
#define FAMILY_CASE(name, value, json, family, printer)                                  \
    case GT_FINDING_##name:                                                              \
        return GT_FAMILY_##family;
#define BY_NAME(name, value, json, family, printer)                                      \
    if (!strcmp(kind, json))                                                             \
        return GT_FINDING_##name;

const char *gt_finding_kind_name(int kind)
{
    switch (kind) {
        GT_FINDING_KINDS(NAME_CASE)
    }
    return "unknown";
}

int gt_finding_family(int kind)
{
    switch (kind) {
        GT_FINDING_KINDS(FAMILY_CASE)
    }
    return -1;
}

int gt_finding_kind_of(const char *kind)
{
    GT_FINDING_KINDS(BY_NAME)
    return -1;
}

const char *gt_cut_reason_name(int reason)
{
    static const char *const names[] = {"",
                                        "detach",
                                        "no_grad",
                                        "not_differentiable",
                                        "item",
                                        "no_input_requires_grad",
                                        "data",
                                        "unused",
                                        "not_on_path",
                                        "input_does_not_require_grad",
                                        "requires_grad_too_late"};
    _Static_assert(sizeof names / sizeof names[0] == GT_CUT_LATE + 1,
                   "a name for every enum gt_cut_reason");
    return reason >= 0 && reason <= GT_CUT_LATE ? names[reason] : "";
}

void gt_finding_release(gt_finding *f)
{
    free(f->mutations);
    free(f->suggestion);
    free(f->name);
    free(f->written);
    free(f->candidates);
    for (size_t i = 0; i < f->n_params; i++)
        free(f->params[i].name);
    free(f->params);
    f->params = NULL;
    f->n_params = 0;
}

void gt_findings_free(gt_findings *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        gt_finding_release(&f->v[i]);
    free(f->v);
    free(f);
}
