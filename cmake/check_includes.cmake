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
#   daemon/http/        common/ daemon/http/  (knows nothing of the engine)
#   daemon/auth/        common/ daemon/auth/
#   daemon/validation/  common/ engine/ daemon/http/api_error.h daemon/http/api_result.h daemon/validation/
#   daemon/monitoring/  common/ storage/ engine/ daemon/monitoring/
#                       kernels/fast_path_report.h (the backend's attention paths)
#   daemon/api/         common/ storage/ engine/ daemon/http/ daemon/auth/
#                       daemon/validation/ daemon/monitoring/ daemon/api/
#                       kernels/fast_path_report.h
#   daemon/commands/    common/ kernels/ engine/ daemon/commands/
#                       daemon/model_source.h daemon/cpu_isa_option.h
#   daemon/ (its own files)  common/ kernels/ storage/ engine/ daemon/
#   client/         common/ client/  (stands alone: talks HTTP only)
#
# A file follows the rule of the most specific folder it is in (engine/ covers
# only engine/*, daemon/ only daemon/*). An allowed entry may name one file.
# Some folders may also not include a library header (FORBIDDEN_HEADERS):
# httplib stays in daemon/http/, the route table (daemon/api/routes.*) and
# the server; handlers answer through daemon/http/reply.h.
cmake_minimum_required(VERSION 3.25)

set(RULES
  "common/|common/"
  "kernels/|common/ kernels/"
  "storage/|common/ storage/"
  "engine/model/|common/ kernels/ engine/model/"
  "engine/text/|common/ engine/model/ engine/text/"
  "engine/kv/|common/ storage/ engine/kv/"
  "engine/|common/ kernels/ storage/ engine/"
  "daemon/http/|common/ daemon/http/"
  "daemon/auth/|common/ daemon/auth/"
  "daemon/validation/|common/ engine/ daemon/http/api_error.h daemon/http/api_result.h daemon/validation/"
  "daemon/monitoring/|common/ storage/ engine/ daemon/monitoring/ kernels/fast_path_report.h"
  "daemon/api/|common/ storage/ engine/ daemon/http/ daemon/auth/ daemon/validation/ daemon/monitoring/ daemon/api/ kernels/fast_path_report.h"
  "daemon/commands/|common/ kernels/ engine/ daemon/commands/ daemon/model_source.h daemon/cpu_isa_option.h"
  "daemon/|common/ kernels/ storage/ engine/ daemon/"
  "client/|common/ client/")
set(PROJECT_FOLDERS common kernels storage engine daemon client tests)
# folder|library header (<...>) it may not include|files of it that may
set(FORBIDDEN_HEADERS
  "daemon/api/|httplib.h|daemon/api/routes.h daemon/api/routes.cpp"
  "daemon/auth/|httplib.h"
  "daemon/validation/|httplib.h"
  "daemon/monitoring/|httplib.h"
  "engine/|httplib.h"
  "storage/|httplib.h")

# The folders of RULES, to find the most specific one a file is in.
set(rule_folders "")
foreach(rule ${RULES})
  string(REGEX REPLACE "\\|.*$" "" f "${rule}")
  list(APPEND rule_folders "${f}")
endforeach()

# Sets `${out}` to the longest rule folder that `src` is in.
function(owning_folder src out)
  set(best "")
  string(LENGTH "" best_len)
  foreach(f ${rule_folders})
    string(FIND "${src}" "${f}" at)
    string(LENGTH "${f}" len)
    if(at EQUAL 0 AND len GREATER best_len)
      set(best "${f}")
      set(best_len ${len})
    endif()
  endforeach()
  set(${out} "${best}" PARENT_SCOPE)
endfunction()

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
    owning_folder("${src}" owner)
    if(NOT owner STREQUAL folder)
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

foreach(rule ${FORBIDDEN_HEADERS})
  string(REPLACE "|" ";" parts "${rule}")
  list(GET parts 0 folder)
  list(GET parts 1 header)
  set(exempt "")
  list(LENGTH parts n_parts)
  if(n_parts GREATER 2)
    list(GET parts 2 exempt)
    string(REPLACE " " ";" exempt "${exempt}")
  endif()
  file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${folder}*.h ${SOURCE_DIR}/${folder}*.cpp)
  foreach(src ${sources})
    if(src MATCHES "node_modules/" OR src IN_LIST exempt)
      continue()
    endif()
    file(STRINGS ${SOURCE_DIR}/${src} hits REGEX "^[ \t]*#[ \t]*include[ \t]+<${header}>")
    if(hits)
      string(APPEND violations "  ${src}: #include <${header}> (${folder} may not include <${header}>)\n")
    endif()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "include rules (cmake/check_includes.cmake) broken:\n${violations}")
endif()
file(WRITE ${STAMP} "ok\n")
