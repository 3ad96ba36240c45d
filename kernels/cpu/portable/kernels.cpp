// The `portable` set (the compiler's baseline; also what aarch64 gets):
// the generic kernels instantiated on portable/vec.h, compiled with the set's own flags.
#include "kernels/cpu/portable/vec.h"
#include "kernels/cpu/generic/kernel_set.h"
