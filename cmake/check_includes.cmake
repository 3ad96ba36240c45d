# The allowed directions between the project's folders, checked on every build:
# each folder may include only the project folders listed for it (system and
# library headers are not checked). Run in script mode by the
# `prefixd_include_rules` target (see CMakeLists.txt) with -DSOURCE_DIR and
# -DSTAMP; a source that includes a folder it may not fails the build and names
# the file, the include and the rule.
#
#   folder          may include
#   common/         common/
#   kernels/        common/ kernels/
#   storage/        common/ storage/
#   engine/model/   common/ kernels/ engine/model/
#   engine/text/    common/ engine/model/ (the GGUF reader) engine/text/
#   engine/kv/      common/ storage/ engine/kv/
#   engine/         common/ kernels/ storage/ engine/ (every subfolder)
#   daemon/         common/ kernels/ storage/ engine/ daemon/
#   client/         common/ client/  (stands alone: talks HTTP only)
cmake_minimum_required(VERSION 3.25)

set(RULES
  "common/|common/"
  "kernels/|common/ kernels/"
  "storage/|common/ storage/"
  "engine/model/|common/ kernels/ engine/model/"
  "engine/text/|common/ engine/model/ engine/text/"
  "engine/kv/|common/ storage/ engine/kv/"
  "engine/|common/ kernels/ storage/ engine/"
  "daemon/|common/ kernels/ storage/ engine/ daemon/"
  "client/|common/ client/")
set(PROJECT_FOLDERS common kernels storage engine daemon client tests)

set(violations "")
foreach(rule ${RULES})
  string(REPLACE "|" ";" parts "${rule}")
  list(GET parts 0 folder)
  list(GET parts 1 allowed)
  string(REPLACE " " ";" allowed "${allowed}")
  file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR}
       ${SOURCE_DIR}/${folder}*.h ${SOURCE_DIR}/${folder}*.cpp
       ${SOURCE_DIR}/${folder}*.cu ${SOURCE_DIR}/${folder}*.cuh)
  foreach(src ${sources})
    if(src MATCHES "node_modules/")
      continue()
    endif()
    # A file belongs to the most specific rule: engine/ covers only engine/*.
    if(folder STREQUAL "engine/" AND src MATCHES "^engine/[^/]+/")
      continue()
    endif()
    file(STRINGS ${SOURCE_DIR}/${src} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"[^\"]+\"")
    foreach(line ${includes})
      string(REGEX REPLACE "^[^\"]*\"([^\"]+)\".*$" "\\1" path "${line}")
      string(REGEX MATCH "^[^/]+" top "${path}")
      if(NOT path MATCHES "/" OR NOT top IN_LIST PROJECT_FOLDERS)
        continue()
      endif()
      set(ok FALSE)
      foreach(prefix ${allowed})
        string(FIND "${path}" "${prefix}" at)
        if(at EQUAL 0)
          set(ok TRUE)
        endif()
      endforeach()
      if(NOT ok)
        string(APPEND violations "  ${src}: #include \"${path}\" (${folder} may include only: ${allowed})\n")
      endif()
    endforeach()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "include rules (cmake/check_includes.cmake) broken:\n${violations}")
endif()
file(WRITE ${STAMP} "ok\n")
