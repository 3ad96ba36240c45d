// Block hashing for the prefix index: the namespace seed (model, KV dtype,
// block size, deployment secret, cache salt) and the chained XXH3-128 hashes
// of a prompt's full token blocks (DESIGN.md, "Block hashing").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/hash128.h"

namespace prefixd {

// A block's chain hash: the name says its role, the type is the project's one
// 128-bit hash (common/hash128.h), so keys pass between engine and storage
// unchanged. Unordered containers key it with Hash128Hasher.
using BlockHash = Hash128;

// The 16 zero bytes that stand for the parent of a prompt's first block.
constexpr BlockHash kRootParentHash{};

// The 64-bit namespace seed: XXH3-64 over
//   fingerprint.lo (u64 LE) | fingerprint.hi (u64 LE) | kv_dtype (u8) |
//   block_size (i32 LE) | secret (16 bytes) | salt length (u64 LE) | salt bytes.
// Different salts (tenants), models, dtypes, block sizes or secrets give
// different seeds, so their blocks never share hashes.
uint64_t namespace_seed(const Hash128& model_fingerprint, uint8_t kv_dtype, int32_t block_size,
                        const std::array<uint8_t, 16>& secret, std::string_view cache_salt);

// The function that hashes one block's input bytes with the namespace seed.
// Injectable so tests can force collisions. A plain function pointer: it sits
// in the hot loop of hash_blocks.
using BlockHashFn = BlockHash (*)(const void* data, size_t n_bytes, uint64_t namespace_seed);

// The production hash: XXH3_128bits_withSeed, seeded with the namespace seed.
BlockHash xxh3_block_hash(const void* data, size_t n_bytes, uint64_t namespace_seed);

// Hash of one block: fn(parent ‖ tokens, namespace_seed), where parent is
// written as lo (u64 LE) then hi (u64 LE) and each token as an int32 LE.
BlockHash hash_block(const BlockHash& parent, std::span<const int32_t> block_tokens,
                     uint64_t namespace_seed, BlockHashFn fn = xxh3_block_hash);

// Chain hashes of the full blocks of `tokens`: result[i] covers tokens
// [i*block_size, (i+1)*block_size) and chains result[i-1] (kRootParentHash
// for i = 0). A trailing partial block is not hashed.
std::vector<BlockHash> hash_blocks(std::span<const int32_t> tokens, int32_t block_size,
                                   uint64_t namespace_seed, BlockHashFn fn = xxh3_block_hash);

// Extends `hashes` (the chain hashes of the first hashes.size() blocks of
// `tokens`) with the hashes of every further full block of `tokens`. For a
// sequence whose tokens grow (decode), this hashes only the new blocks.
void extend_block_hashes(std::vector<BlockHash>& hashes, std::span<const int32_t> tokens,
                         int32_t block_size, uint64_t namespace_seed,
                         BlockHashFn fn = xxh3_block_hash);

}  // namespace prefixd
