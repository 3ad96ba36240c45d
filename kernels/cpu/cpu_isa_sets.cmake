# The CPU backend's instruction sets, read from kernels/cpu/isa_sets.def: one
# object library per set built for this target, compiled from
# kernels/cpu/<set>/kernels.cpp with the set's flags and namespace, linked into
# prefixd_kernels. Sets PREFIXD_CPU_ISA_SETS (the sets built, most portable
# first), from which tests/CMakeLists.txt registers the per-set test runs.
# Included from the top-level CMakeLists.txt after prefixd_kernels is defined.

# isa_sets.def's arch column: whether this target builds it (kIsaArch_* in cpu_isa.h says the same to C++).
set(PREFIXD_ISA_ARCH_any TRUE)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(PREFIXD_ISA_ARCH_x86_64 TRUE)
else()
  set(PREFIXD_ISA_ARCH_x86_64 FALSE)
endif()

set(PREFIXD_CPU_ISA_SETS)
set(isa_sets_def ${CMAKE_SOURCE_DIR}/kernels/cpu/isa_sets.def)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${isa_sets_def})
file(STRINGS ${isa_sets_def} isa_set_lines REGEX "^PREFIXD_CPU_ISA_SET\\(")
foreach(line IN LISTS isa_set_lines)
  if(NOT line MATCHES "^PREFIXD_CPU_ISA_SET\\(([a-z0-9_]+), *([A-Za-z0-9_]+), *([a-z0-9_]+), *\"([^\"]*)\", *\"([^\"]*)\"\\)")
    message(FATAL_ERROR "isa_sets.def: cannot read '${line}'")
  endif()
  set(name ${CMAKE_MATCH_1})
  set(enum ${CMAKE_MATCH_2})
  set(arch ${CMAKE_MATCH_3})
  separate_arguments(flags UNIX_COMMAND "${CMAKE_MATCH_5}")
  if(NOT DEFINED PREFIXD_ISA_ARCH_${arch})
    message(FATAL_ERROR "isa_sets.def: set ${name} has arch '${arch}', which cpu_isa_sets.cmake does not know")
  endif()
  if(NOT PREFIXD_ISA_ARCH_${arch})
    continue()
  endif()
  add_library(prefixd_cpu_${name} OBJECT ${CMAKE_SOURCE_DIR}/kernels/cpu/${name}/kernels.cpp)
  target_link_libraries(prefixd_cpu_${name} PRIVATE prefixd_common)
  target_compile_definitions(prefixd_cpu_${name} PRIVATE PREFIXD_ISA_NS=${name} PREFIXD_ISA_ENUM=${enum})
  target_compile_options(prefixd_cpu_${name} PRIVATE ${PREFIXD_WARNINGS} ${flags})
  target_sources(prefixd_kernels PRIVATE $<TARGET_OBJECTS:prefixd_cpu_${name}>)
  list(APPEND PREFIXD_CPU_ISA_SETS ${name})
endforeach()
message(STATUS "CPU instruction sets built: ${PREFIXD_CPU_ISA_SETS}")
