/*
 * LeakSanitizer's hooks for the programs of this tree (the gradtrace
 * command, the unit tests, the fuzz harnesses): linked into each program,
 * not into the inspector library, so a program that embeds the library
 * keeps its own leak policy. Empty unless built with AddressSanitizer.
 */

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GT__ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(GT__ASAN)
#define GT__ASAN 1
#endif
#ifdef GT__ASAN
/* LeakSanitizer's hook for default suppressions. Graphviz 2.42 leaks in its
 * dot layout (virtual edges of clusters, allocated through libgvc's gmalloc,
 * where LSan's fast unwinder stops) and, through its pango plugin, in
 * pango's and fontconfig's font caches; valgrind's full stacks show none of
 * these leaks comes from inspector/graph.c. Whatever graph.c or cgraph allocates
 * stays checked.
 * A program that links this file and defines its own hook must fold
 * these lines into it. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:gmalloc\n"
           "leak:grealloc\n"
           "leak:libgvplugin_dot_layout.so\n"
           "leak:libgvplugin_pango.so\n"
           "leak:libfontconfig.so\n"
           "leak:libpango\n";
}

/* ... and without the table of suppressions used at exit, which would
 * otherwise end every render's stderr. */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
    return "print_suppressions=0";
}
#endif

/* ISO C wants a translation unit to declare something. */
typedef int gt__lsan_hooks_unit;
