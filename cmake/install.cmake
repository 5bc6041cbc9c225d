# What a Python package build (scikit-build-core, `pip install .`) installs.
# CMAKE_INSTALL_PREFIX is the wheel's site-packages; the pure-Python package
# python/gradtrace is added by scikit-build-core (pyproject.toml,
# wheel.packages).
#
#   <site-packages>/gradtrace/_bin/gradtrace   the inspector command, run by
#                                              the `gradtrace` launcher
#   <site-packages>/gradtrace/_build.py        gradtrace and torch releases
#   <site-packages>/<every extension module>   top-level, as in build/python
#
# Extension modules are found, not listed: every MODULE or SHARED library
# target defined anywhere under adapters/ and python/ (the two adapters,
# the trace reader) is installed beside the others, with an
# RPATH to its own directory and to torch's libraries (site-packages/torch/lib)
# so a module linked against libtorch loads whichever environment the wheel
# goes to.

function(gt_collect_libraries dir out)
    set(found "")
    get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(t IN LISTS targets)
        get_target_property(type ${t} TYPE)
        if(type STREQUAL "MODULE_LIBRARY" OR type STREQUAL "SHARED_LIBRARY")
            list(APPEND found ${t})
        endif()
    endforeach()
    get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
    foreach(sub IN LISTS subdirs)
        gt_collect_libraries(${sub} more)
        list(APPEND found ${more})
    endforeach()
    set(${out} ${found} PARENT_SCOPE)
endfunction()

gt_collect_libraries(${CMAKE_SOURCE_DIR}/adapters GT_INSTALL_LIBS_ADAPTERS)
gt_collect_libraries(${CMAKE_SOURCE_DIR}/python GT_INSTALL_LIBS_PYTHON)
set(GT_INSTALL_LIBS ${GT_INSTALL_LIBS_ADAPTERS} ${GT_INSTALL_LIBS_PYTHON})
if(NOT GT_INSTALL_LIBS)
    message(FATAL_ERROR "gradtrace: no extension module to install "
                        "(is GT_PYTHON_ADAPTER off?)")
endif()
message(STATUS "gradtrace: installing extension modules: ${GT_INSTALL_LIBS}")
# After $ORIGIN/torch/lib, the torch library directory of the environment
# the build found: a venv that sees torch through --system-site-packages, or
# a --user install, has no torch/ beside the modules. (auditwheel drops that
# absolute entry from a binary wheel, scripts/wheel.)
set(GT_INSTALL_RPATH "$ORIGIN;$ORIGIN/torch/lib")
if(GT_TORCH_CMAKE_PREFIX)
    # torch.utils.cmake_prefix_path is <torch>/share/cmake
    get_filename_component(_gt_torch_dir ${GT_TORCH_CMAKE_PREFIX} DIRECTORY)
    get_filename_component(_gt_torch_dir ${_gt_torch_dir} DIRECTORY)
    list(APPEND GT_INSTALL_RPATH ${_gt_torch_dir}/lib)
endif()
set_target_properties(${GT_INSTALL_LIBS} PROPERTIES INSTALL_RPATH "${GT_INSTALL_RPATH}")
install(TARGETS ${GT_INSTALL_LIBS} LIBRARY DESTINATION . RUNTIME DESTINATION .)

install(TARGETS gradtrace RUNTIME DESTINATION gradtrace/_bin)

# The trace format and the user guide, beside the package: `gradtrace sql
# --help` names the installed SCHEMA.md (gt_doc_path, cli/cmd_util.c).
install(FILES ${CMAKE_SOURCE_DIR}/schema/SCHEMA.md DESTINATION gradtrace/docs)
file(GLOB GT_DOCS ${CMAKE_SOURCE_DIR}/docs/*.md)
install(FILES ${GT_DOCS} DESTINATION gradtrace/docs)

configure_file(${CMAKE_SOURCE_DIR}/cmake/_build.py.in
               ${CMAKE_BINARY_DIR}/package/_build.py @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/package/_build.py DESTINATION gradtrace)

# Shell completion (completions/), into the environment's data directory
# (scikit-build-core's SKBUILD_DATA_DIR is the venv or prefix itself):
#   <prefix>/share/bash-completion/completions/gradtrace
#   <prefix>/share/zsh/site-functions/_gradtrace
# bash-completion and zsh read these where <prefix> is /usr or /usr/local;
# from a venv, `source <venv>/share/bash-completion/completions/gradtrace`
# (bash) or add <venv>/share/zsh/site-functions to fpath (zsh).
if(DEFINED SKBUILD_DATA_DIR)
    install(FILES ${CMAKE_SOURCE_DIR}/completions/gradtrace.bash
            DESTINATION ${SKBUILD_DATA_DIR}/share/bash-completion/completions
            RENAME gradtrace)
    install(FILES ${CMAKE_SOURCE_DIR}/completions/_gradtrace
            DESTINATION ${SKBUILD_DATA_DIR}/share/zsh/site-functions)
endif()
