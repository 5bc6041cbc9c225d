# GT_GRAPHVIZ_BUILTIN_PLUGINS=ON (scripts/wheel sets it): link the Graphviz
# plugins `gradtrace graph` renders with into the inspector and hand them to
# gvc as built-ins (gvContextPlugins, inspector/graph_render.c), so that a
# binary wheel carries them like any other library it links (auditwheel
# copies them in) and never reads the system's plugin directory, its config6
# file or GVBINDIR:
#
#   libgvplugin_dot_layout  the dot layout
#   libgvplugin_core        the dot and svg renderers
#   libgvplugin_pango       png through cairo (and pango's text layout)
#
# Off (the default), gvc loads the plugins the system registered, as the
# `dot` command does.
option(GT_GRAPHVIZ_BUILTIN_PLUGINS
       "link Graphviz's dot layout, core and pango plugins in as built-ins" OFF)
if(NOT GT_GRAPHVIZ_BUILTIN_PLUGINS)
    return()
endif()

pkg_get_variable(_gt_gv_libdir libgvc libdir)
pkg_get_variable(_gt_gv_plugins libgvc plugins)
set(_gt_gv_plugindir ${_gt_gv_libdir}/graphviz)
set(_gt_gv_plugin_libs "")
foreach(p dot_layout core pango)
    # the plugins have no development symlink: the versioned file itself
    find_file(GT_GVPLUGIN_${p} libgvplugin_${p}.so.${_gt_gv_plugins}
              PATHS ${_gt_gv_plugindir} NO_DEFAULT_PATH)
    if(NOT GT_GVPLUGIN_${p})
        message(FATAL_ERROR "gradtrace: no libgvplugin_${p}.so.${_gt_gv_plugins} in "
                            "${_gt_gv_plugindir}: apt-get install libgvc6")
    endif()
    list(APPEND _gt_gv_plugin_libs ${GT_GVPLUGIN_${p}})
endforeach()
message(STATUS "gradtrace: Graphviz plugins built in: ${_gt_gv_plugin_libs}")
target_compile_definitions(gtinspector PRIVATE GT_GRAPHVIZ_BUILTIN_PLUGINS)
target_link_libraries(gtinspector PUBLIC ${_gt_gv_plugin_libs})
# The plugins live outside the loader's path: a program linked with them
# finds them with LD_LIBRARY_PATH=<plugin directory>, as auditwheel does
# (scripts/wheel), which then copies them into the wheel and points every
# RPATH at the copies.
