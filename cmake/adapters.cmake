# Which PyTorch adapters this build has, for `gradtrace --version`
# (generated/gt_build.h) and the package (gradtrace/_build.py), and a warning
# when the engine adapter is not built. Included after recorder/ (where
# adapters/engine/CMakeLists.txt sets GT_ENGINE_BUILT) and before cli/.
#
#   GT_BUILD_TORCH      the torch release the adapters were built against
#                       ("" when the interpreter has no torch)
#   GT_BUILD_ENGINE     "engine" when the engine adapter is built, else ""
#   GT_BUILD_ADAPTERS   e.g. "engine (torch 2.13.0+cpu), dispatch", or
#                       "dispatch (engine: <why it is not built>)"

set(GT_BUILD_TORCH "${GT_TORCH_VERSION}")
set(GT_BUILD_ENGINE "")
if(NOT GT_PYTHON_ADAPTER)
    set(GT_BUILD_ADAPTERS "none (built without the PyTorch adapter)")
elseif(GT_ENGINE_BUILT)
    set(GT_BUILD_ENGINE "engine")
    set(GT_BUILD_ADAPTERS "engine (torch ${GT_TORCH_VERSION}), dispatch")
else()
    if(GT_ENGINE_WHY)
        set(_gt_why "${GT_ENGINE_WHY}")
    elseif(NOT GT_TORCH_VERSION)
        set(_gt_why "${GT_PYTHON_EXE} does not import torch")
    else()
        # adapters/engine/ said why in its own "gradtrace engine adapter:" line
        set(_gt_why "not built for torch ${GT_TORCH_VERSION}")
    endif()
    set(GT_BUILD_ADAPTERS "dispatch (engine: ${_gt_why})")
    # pip hides a build's output unless it fails or is run with -v; the
    # warning is in every log (pip -v, pip wheel -v, python -m build,
    # scripts/wheel), and under pip it is also written to the terminal pip
    # runs on, when there is one. `gradtrace --version` says it afterwards.
    string(CONCAT _gt_msg "gradtrace: no engine adapter (${_gt_why}): traces "
                          "will be recorded through the dispatch adapter, at 2-4x its "
                          "cost; see docs/install.md")
    message(WARNING "${_gt_msg}")
    if(SKBUILD)
        execute_process(COMMAND sh -c "printf '\\n%s\\n' \"$1\" >/dev/tty" sh "${_gt_msg}"
                        OUTPUT_QUIET ERROR_QUIET)
    endif()
endif()
message(STATUS "gradtrace adapters: ${GT_BUILD_ADAPTERS}")
configure_file(${CMAKE_SOURCE_DIR}/cmake/gt_build.h.in ${GT_GEN_DIR}/gt_build.h @ONLY)
