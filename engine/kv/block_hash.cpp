// Namespace seeds and chained block hashes (XXH3). See block_hash.h.
#include "engine/kv/block_hash.h"

#include <bit>
#include <cstring>
#include <string>

#include <xxhash.h>

#include "common/result.h"

namespace prefixd {
namespace {

void put_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

void put_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Writes parent (lo, hi as u64 LE) and tokens as LE int32 into buf, which holds
// 16 + 4 * tokens.size() bytes.
void fill_block_input(uint8_t* buf, const BlockHash& parent, std::span<const int32_t> tokens) {
  put_le64(buf, parent.lo);
  put_le64(buf + 8, parent.hi);
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(buf + 16, tokens.data(), tokens.size() * sizeof(int32_t));
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      put_le32(buf + 16 + 4 * i, static_cast<uint32_t>(tokens[i]));
    }
  }
}

}  // namespace

uint64_t namespace_seed(const Hash128& model_fingerprint, uint8_t kv_dtype, int32_t block_size,
                        const std::array<uint8_t, 16>& secret, std::string_view cache_salt) {
  std::string buf(8 + 8 + 1 + 4 + 16 + 8 + cache_salt.size(), '\0');
  auto* p = reinterpret_cast<uint8_t*>(buf.data());
  put_le64(p, model_fingerprint.lo);
  put_le64(p + 8, model_fingerprint.hi);
  p[16] = kv_dtype;
  put_le32(p + 17, static_cast<uint32_t>(block_size));
  std::memcpy(p + 21, secret.data(), secret.size());
  put_le64(p + 37, cache_salt.size());
  if (!cache_salt.empty()) std::memcpy(p + 45, cache_salt.data(), cache_salt.size());
  return XXH3_64bits(buf.data(), buf.size());
}

BlockHash xxh3_block_hash(const void* data, size_t n_bytes, uint64_t namespace_seed) {
  const XXH128_hash_t h = XXH3_128bits_withSeed(data, n_bytes, namespace_seed);
  return BlockHash{h.low64, h.high64};
}

BlockHash hash_block(const BlockHash& parent, std::span<const int32_t> block_tokens,
                     uint64_t namespace_seed, BlockHashFn fn) {
  constexpr size_t kStackTokens = 256;
  const size_t n_bytes = 16 + 4 * block_tokens.size();
  if (block_tokens.size() <= kStackTokens) {
    uint8_t buf[16 + 4 * kStackTokens];  // (16 + 4 * n_tokens) bytes: parent ‖ tokens
    fill_block_input(buf, parent, block_tokens);
    return fn(buf, n_bytes, namespace_seed);
  }
  std::vector<uint8_t> buf(n_bytes);  // (16 + 4 * n_tokens) bytes: parent ‖ tokens
  fill_block_input(buf.data(), parent, block_tokens);
  return fn(buf.data(), n_bytes, namespace_seed);
}

void extend_block_hashes(std::vector<BlockHash>& hashes, std::span<const int32_t> tokens,
                         int32_t block_size, uint64_t namespace_seed, BlockHashFn fn) {
  PREFIXD_CHECK(block_size > 0, "block_size must be positive");
  const size_t bs = static_cast<size_t>(block_size);
  const size_t n_full = tokens.size() / bs;
  PREFIXD_CHECK(hashes.size() <= n_full, "more hashes than full blocks");
  hashes.reserve(n_full);
  // One scratch buffer for the whole chain: (16 + 4 * block_size) bytes.
  std::vector<uint8_t> buf(16 + 4 * bs);
  for (size_t i = hashes.size(); i < n_full; ++i) {
    const BlockHash parent = i == 0 ? kRootParentHash : hashes[i - 1];
    fill_block_input(buf.data(), parent, tokens.subspan(i * bs, bs));
    hashes.push_back(fn(buf.data(), buf.size(), namespace_seed));
  }
}

std::vector<BlockHash> hash_blocks(std::span<const int32_t> tokens, int32_t block_size,
                                   uint64_t namespace_seed, BlockHashFn fn) {
  std::vector<BlockHash> hashes;
  extend_block_hashes(hashes, tokens, block_size, namespace_seed, fn);
  return hashes;
}

}  // namespace prefixd
