// The `avx2` set (AVX2 + FMA + F16C):
// the generic kernels instantiated on avx2/vec.h, compiled with the set's own flags, and
// the 256-bit decode tiles of the K formats.
#include "kernels/cpu/avx2/vec.h"
#include "kernels/cpu/avx2/int8_k_rows.h"  // decode of Q4_K, Q5_K, Q6_K in ymm
#include "kernels/cpu/avx2/int8_panels.h"  // prefill of the 4- and 5-bit block formats in int8
#include "kernels/cpu/generic/kernel_set.h"
