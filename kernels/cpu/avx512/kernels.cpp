// The AVX-512 sets: `avx512bf16` (built with AVX512_BF16) and `avx512` (without); this file is compiled once for each:
// the generic kernels instantiated on avx512/vec.h, compiled with the set's own flags, and (avx512bf16)
// the VNNI int8 panels and decode tiles of the 32-value formats, and in both the 512-bit decode tiles of
// the K formats.
#include "kernels/cpu/avx512/vec.h"
#include "kernels/cpu/avx512/int8_k_rows.h"     // decode of Q4_K, Q5_K, Q6_K in zmm
#include "kernels/cpu/avx512/int8_pair_rows.h"  // avx512bf16 only (AVX512_VNNI): decode of the 32-value formats
#include "kernels/cpu/avx512/int8_panels.h"  // avx512bf16 only (AVX512_VNNI): prefill in int8
#include "kernels/cpu/generic/kernel_set.h"
