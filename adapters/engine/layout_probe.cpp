/*
 * layout_probe.cpp: compiled alone by CMakeLists.txt (try_compile) against
 * the installed torch's headers before the engine adapter is built: it
 * compiles only where torch_layout.h finds every private member the shim
 * reads, with the type the shim expects.
 */
#include "torch_layout.h"

/* the checks are static_asserts; this only gives the object file a symbol */
int gt_layout_probe(void)
{
    return (int)sizeof(gt_layout::NodeWeak::type);
}
