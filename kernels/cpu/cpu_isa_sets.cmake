# The CPU backend's instruction sets: one object library per set, compiled from
# kernels/cpu/<isa>/kernels.cpp with that set's flags and namespace, linked into
# prefixd_kernels. The x86 sets exist only on x86-64; `portable` everywhere.
# Included from the top-level CMakeLists.txt after prefixd_kernels is defined.

# prefixd_cpu_isa_set(<name> <enum> <source> <flags...>)
function(prefixd_cpu_isa_set name enum source)
  add_library(prefixd_cpu_${name} OBJECT ${source})
  target_link_libraries(prefixd_cpu_${name} PRIVATE prefixd_common)
  target_compile_definitions(prefixd_cpu_${name} PRIVATE PREFIXD_ISA_NS=${name} PREFIXD_ISA_ENUM=${enum})
  target_compile_options(prefixd_cpu_${name} PRIVATE ${PREFIXD_WARNINGS} ${ARGN})
  target_sources(prefixd_kernels PRIVATE $<TARGET_OBJECTS:prefixd_cpu_${name}>)
endfunction()

# -Wno-psabi: the portable set's 32-byte generic vectors never cross a call (always inlined).
prefixd_cpu_isa_set(portable kPortable ${CMAKE_SOURCE_DIR}/kernels/cpu/portable/kernels.cpp -Wno-psabi)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(PREFIXD_AVX2_FLAGS -mavx2 -mfma -mf16c)
  set(PREFIXD_AVX512_FLAGS ${PREFIXD_AVX2_FLAGS} -mavx512f -mavx512bw -mavx512vl -mavx512dq)
  prefixd_cpu_isa_set(avx2 kAvx2 ${CMAKE_SOURCE_DIR}/kernels/cpu/avx2/kernels.cpp ${PREFIXD_AVX2_FLAGS})
  prefixd_cpu_isa_set(avx512 kAvx512 ${CMAKE_SOURCE_DIR}/kernels/cpu/avx512/kernels.cpp ${PREFIXD_AVX512_FLAGS})
  prefixd_cpu_isa_set(avx512bf16 kAvx512Bf16 ${CMAKE_SOURCE_DIR}/kernels/cpu/avx512/kernels.cpp
                      ${PREFIXD_AVX512_FLAGS} -mavx512bf16 -mavx512vnni)
endif()
