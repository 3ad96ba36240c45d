// Tests for block hashing: the chain against direct XXH3 calls, namespace seed
// sensitivity, and that partial blocks are never hashed.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include <xxhash.h>

#include "engine/kv/block_hash.h"

using namespace prefixd;

namespace {

std::vector<int32_t> iota_tokens(int n, int32_t start = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// The DESIGN.md definition spelled out with raw bytes.
BlockHash direct_hash(const BlockHash& parent, const int32_t* tokens, int n, uint64_t seed) {
  std::vector<uint8_t> buf(16 + 4 * static_cast<size_t>(n));
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<uint8_t>(parent.lo >> (8 * i));
  for (int i = 0; i < 8; ++i) buf[8 + i] = static_cast<uint8_t>(parent.hi >> (8 * i));
  for (int k = 0; k < n; ++k) {
    const uint32_t v = static_cast<uint32_t>(tokens[k]);
    for (int i = 0; i < 4; ++i) buf[16 + 4 * k + i] = static_cast<uint8_t>(v >> (8 * i));
  }
  const XXH128_hash_t h = XXH3_128bits_withSeed(buf.data(), buf.size(), seed);
  return BlockHash{h.low64, h.high64};
}

const std::array<uint8_t, 16> kSecret = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
const Hash128 kFingerprint{0x1234, 0x5678};

}  // namespace

TEST_CASE("hash_blocks equals the chained XXH3-128 definition") {
  const uint64_t seed = 0xdeadbeefcafeULL;
  const auto tokens = iota_tokens(64, -5);  // includes negative ids: LE int32 bytes
  const auto hashes = hash_blocks(tokens, 16, seed);
  REQUIRE(hashes.size() == 4);
  BlockHash parent{};
  for (int i = 0; i < 4; ++i) {
    const BlockHash want = direct_hash(parent, tokens.data() + 16 * i, 16, seed);
    CHECK(hashes[i] == want);
    parent = want;
  }
  CHECK(hash_block(kRootParentHash, std::span(tokens).first(16), seed) == hashes[0]);
  CHECK(hash_block(hashes[0], std::span(tokens).subspan(16, 16), seed) == hashes[1]);
}

TEST_CASE("partial trailing blocks are not hashed") {
  const auto tokens = iota_tokens(47);
  CHECK(hash_blocks(tokens, 16, 1).size() == 2);
  CHECK(hash_blocks(std::span(tokens).first(15), 16, 1).empty());
  CHECK(hash_blocks(std::span(tokens).first(0), 16, 1).empty());
  // The full blocks' hashes do not depend on the partial tail.
  const auto a = hash_blocks(tokens, 16, 1);
  const auto b = hash_blocks(std::span(tokens).first(32), 16, 1);
  CHECK(a == b);
}

TEST_CASE("the chain makes a block's hash depend on every earlier token") {
  auto tokens = iota_tokens(48);
  const auto base = hash_blocks(tokens, 16, 7);
  tokens[3] = 999;
  const auto changed = hash_blocks(tokens, 16, 7);
  CHECK(changed[0] != base[0]);
  CHECK(changed[1] != base[1]);
  CHECK(changed[2] != base[2]);
  // Same third block tokens, different history: different hash.
  CHECK(hash_block(base[1], std::span(tokens).subspan(32, 16), 7) == base[2]);
}

TEST_CASE("extend_block_hashes hashes only the new full blocks") {
  const auto tokens = iota_tokens(80);
  std::vector<BlockHash> hashes = hash_blocks(std::span(tokens).first(20), 16, 3);
  REQUIRE(hashes.size() == 1);
  extend_block_hashes(hashes, std::span(tokens).first(50), 16, 3);
  CHECK(hashes.size() == 3);
  extend_block_hashes(hashes, tokens, 16, 3);
  CHECK(hashes == hash_blocks(tokens, 16, 3));
}

TEST_CASE("block size changes the hashes") {
  const auto tokens = iota_tokens(64);
  const auto h16 = hash_blocks(tokens, 16, 1);
  const auto h32 = hash_blocks(tokens, 32, 1);
  REQUIRE(h32.size() == 2);
  CHECK(h32[0] != h16[1]);
  CHECK(h32[0] == direct_hash(BlockHash{}, tokens.data(), 32, 1));
}

TEST_CASE("namespace_seed depends on every input") {
  const uint64_t base = namespace_seed(kFingerprint, 1, 16, kSecret, "");
  CHECK(base == namespace_seed(kFingerprint, 1, 16, kSecret, ""));
  CHECK(base != namespace_seed(kFingerprint, 1, 16, kSecret, "tenant-a"));
  CHECK(namespace_seed(kFingerprint, 1, 16, kSecret, "tenant-a") !=
        namespace_seed(kFingerprint, 1, 16, kSecret, "tenant-b"));
  CHECK(base != namespace_seed(kFingerprint, 0, 16, kSecret, ""));   // dtype
  CHECK(base != namespace_seed(kFingerprint, 2, 16, kSecret, ""));
  CHECK(base != namespace_seed(kFingerprint, 1, 32, kSecret, ""));   // block size
  CHECK(base != namespace_seed(Hash128{0x1234, 0x5679}, 1, 16, kSecret, ""));  // fingerprint hi
  CHECK(base != namespace_seed(Hash128{0x1235, 0x5678}, 1, 16, kSecret, ""));  // fingerprint lo
  auto other_secret = kSecret;
  other_secret[15] ^= 1;
  CHECK(base != namespace_seed(kFingerprint, 1, 16, other_secret, ""));
}

TEST_CASE("namespace_seed is XXH3-64 over the documented byte layout") {
  std::vector<uint8_t> buf;
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) buf.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  put(kFingerprint.lo, 8);
  put(kFingerprint.hi, 8);
  put(2, 1);
  put(16, 4);
  buf.insert(buf.end(), kSecret.begin(), kSecret.end());
  put(3, 8);
  buf.insert(buf.end(), {'a', 'b', 'c'});
  CHECK(namespace_seed(kFingerprint, 2, 16, kSecret, "abc") == XXH3_64bits(buf.data(), buf.size()));
}

TEST_CASE("different seeds give different block hashes") {
  const auto tokens = iota_tokens(32);
  const uint64_t a = namespace_seed(kFingerprint, 1, 16, kSecret, "a");
  const uint64_t b = namespace_seed(kFingerprint, 1, 16, kSecret, "b");
  const auto ha = hash_blocks(tokens, 16, a);
  const auto hb = hash_blocks(tokens, 16, b);
  CHECK(ha[0] != hb[0]);
  CHECK(ha[1] != hb[1]);
}

namespace {
BlockHash constant_hash(const void*, size_t, uint64_t) { return BlockHash{42, 42}; }
}  // namespace

TEST_CASE("the hash function is injectable") {
  const auto tokens = iota_tokens(48);
  const auto hashes = hash_blocks(tokens, 16, 1, constant_hash);
  REQUIRE(hashes.size() == 3);
  for (const auto& h : hashes) CHECK(h == BlockHash{42, 42});
}

TEST_CASE("block sizes larger than the stack buffer hash correctly") {
  const auto tokens = iota_tokens(600);
  CHECK(hash_block(BlockHash{}, std::span(tokens).first(300), 9) ==
        direct_hash(BlockHash{}, tokens.data(), 300, 9));
  CHECK(hash_blocks(tokens, 300, 9)[0] == direct_hash(BlockHash{}, tokens.data(), 300, 9));
}
