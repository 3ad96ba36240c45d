// The identity every cached block is stored under: the model's fingerprint
// mixed with the numerics of the backend that computed the block. The prefix
// cache promises the uncached answer bit for bit, and which kernels compute a
// block decides its last bits (the CPU backend's plan: a BF16 dot product
// rounds x, a widening set does not; the CUDA backend: its own kernels). So a
// block computed under one plan must never serve a daemon running another:
// replicas on different CPUs sharing the memcached tier, or a disk tier
// carried to a host whose `auto` plan differs. Records, pins and the
// namespace seed all carry this fingerprint, so such blocks are misses
// ("another model"), never wrong answers. Replicas that should share a cache
// run the same plan (`--cpu-isa` names one explicitly).
#pragma once

#include <string>
#include <string_view>

#include "common/hash128.h"

namespace prefixd {

// What decides a backend's results' last bits, in words: "cpu:" + the CPU
// plan's description for the CPU backend, "cuda" for the CUDA backend.
std::string backend_numerics(std::string_view backend_name, std::string_view cpu_plan);

// XXH3-128 over "prefixd-cache-identity-v1" | model.lo | model.hi (u64 LE)
// | numerics bytes. Equal inputs give equal identities; any difference in
// either gives a different one.
Hash128 cache_fingerprint(const Hash128& model_fingerprint, std::string_view numerics);

}  // namespace prefixd
