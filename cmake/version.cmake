# Writes the version header (configure_file leaves it untouched when nothing changed), run at
# configure time and again before every build, so that a binary names the commit it was built
# from: -DSRC=<source dir> -DOUT=<header> -DPROJECT_VERSION=<x.y.z>. A working tree with
# changes to tracked files adds "-dirty".
execute_process(COMMAND git rev-parse --short=10 HEAD
                WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE GPUBENCH_GIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT GPUBENCH_GIT)
  set(GPUBENCH_GIT "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no
                  WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE GPUBENCH_DIRTY OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(GPUBENCH_DIRTY)
    string(APPEND GPUBENCH_GIT "-dirty")
  endif()
endif()
configure_file(${SRC}/cmake/version.hpp.in ${OUT} @ONLY)
