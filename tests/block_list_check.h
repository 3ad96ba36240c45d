// Test support: a backend's batched block transfers (write_blocks /
// read_blocks) against its per-block ones, on any backend: every listed block
// holds exactly its payload, unlisted blocks stay untouched, and read_blocks
// gives back the payloads in any list order.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/backend.h"

namespace prefixd::testing {

// Writes random payloads to `ids` (distinct, in range of geom.n_blocks) with
// one write_blocks call on a fresh pool, then checks them block by block.
inline void check_block_list_transfers(Backend& be, const KvGeometry& geom, const std::vector<int32_t>& ids,
                                       uint32_t seed) {
  auto pool_r = be.allocate_kv_pool(geom);
  REQUIRE(pool_r.ok());
  KvPool& pool = *pool_r;
  const size_t bytes = geom.block_bytes();
  std::mt19937 rng(seed);
  std::vector<std::vector<uint8_t>> payloads(ids.size(), std::vector<uint8_t>(bytes));
  std::vector<BlockWrite> writes;
  for (size_t i = 0; i < ids.size(); ++i) {
    for (uint8_t& b : payloads[i]) b = static_cast<uint8_t>(rng());
    writes.push_back(BlockWrite{ids[i], payloads[i].data()});
  }
  be.write_blocks(pool, nullptr, 0);  // an empty list does nothing
  be.write_blocks(pool, writes.data(), writes.size());
  std::vector<bool> listed(static_cast<size_t>(geom.n_blocks), false);
  std::vector<uint8_t> got(bytes), zero(bytes, 0);
  int64_t wrong = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    listed[static_cast<size_t>(ids[i])] = true;
    be.read_block(pool, ids[i], got.data());
    if (got != payloads[i]) ++wrong;
  }
  for (int32_t b = 0; b < geom.n_blocks; ++b) {
    if (listed[static_cast<size_t>(b)]) continue;
    be.read_block(pool, b, got.data());
    if (got != zero) ++wrong;
  }
  CHECK(wrong == 0);
  // read_blocks in reverse list order: each buffer gets its block's bytes.
  std::vector<std::vector<uint8_t>> back(ids.size(), std::vector<uint8_t>(bytes, 0xAB));
  std::vector<BlockRead> reads;
  for (size_t i = ids.size(); i-- > 0;) reads.push_back(BlockRead{ids[i], back[i].data()});
  be.read_blocks(pool, nullptr, 0);
  be.read_blocks(pool, reads.data(), reads.size());
  int64_t wrong_back = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (back[i] != payloads[i]) ++wrong_back;
  }
  CHECK(wrong_back == 0);
  be.free_kv_pool(pool);
}

}  // namespace prefixd::testing
