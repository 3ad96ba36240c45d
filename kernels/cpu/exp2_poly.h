// Polynomials for 2^r, r in [0, 1), with p(0) = 1 (so 2^0 = 1 exactly), used
// by every instruction set's Vec::exp2_nonpositive (attention's softmax in
// log2 units). Coefficients of r^degree down to r^1; the constant 1 is
// implied. Fitted to the relative error, evaluated in F32 by Horner's rule.
#pragma once

namespace prefixd::cpu {

// Degree 5: relative error 1.5e-7 (F32 operands).
inline constexpr float kExp2Degree5[5] = {1.866836916e-3f, 9.017630480e-3f, 5.579951406e-2f,
                                          2.401645482e-1f, 6.931512952e-1f};
// Degree 4: relative error 3e-6 (probabilities rounded to BF16, relative 2^-9).
inline constexpr float kExp2Degree4[4] = {1.342328731e-2f, 5.224781111e-2f, 2.412778586e-1f,
                                          6.930450797e-1f};

}  // namespace prefixd::cpu
