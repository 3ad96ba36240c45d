// with_count<kMax>(m, fn): calls fn.template operator()<m>() for a runtime m in
// [1, kMax], so register-tile kernels can take their row or group count as a
// template argument. Included by the generic kernels, inside a set's namespace.
#pragma once

namespace prefixd::cpu::PREFIXD_ISA_NS {

template <int kMax, typename Fn>
inline void with_count(int m, Fn&& fn) {
  if constexpr (kMax >= 1) {
    if (m == kMax) {
      fn.template operator()<kMax>();
      return;
    }
    with_count<kMax - 1>(m, fn);
  }
}

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
