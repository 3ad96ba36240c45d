// Weight memory: bump allocation from 64 MiB huge-page chunks, a count of
// live blocks per chunk (weight_memory.h says why).
#include "kernels/cpu/weight_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "common/result.h"

namespace prefixd::cpu {

namespace {

// A transparent huge page of x86-64 and most aarch64 kernels.
constexpr size_t kHugePage = size_t{2} << 20;
// Matrices are carved from chunks of this size; a block of more than
// kOwnChunk bytes gets a chunk of its own (an embedding, an LM head).
constexpr size_t kChunkBytes = size_t{64} << 20;
constexpr size_t kOwnChunk = size_t{16} << 20;
// Blocks under this size (norm-sized matrices, tests' small ones) come from
// aligned_alloc: a chunk would fault a whole 2 MiB page for them.
constexpr size_t kSmallBlock = size_t{64} << 10;

struct Chunk {
  size_t bytes = 0;  // the chunk's size
  size_t used = 0;   // bytes carved so far (blocks are never carved twice)
  size_t live = 0;   // blocks not yet freed
};

struct Chunks {
  std::mutex mu;
  std::map<uintptr_t, Chunk> by_base;  // every chunk, by its first byte
  uintptr_t current = 0;               // the chunk new blocks are carved from; 0: none
};

Chunks& chunks() {
  static Chunks c;
  return c;
}

// bytes (a multiple of kHugePage) on a 2 MiB boundary, advised as huge pages.
void* new_chunk(size_t bytes) {
  void* p = std::aligned_alloc(kHugePage, bytes);
  PREFIXD_CHECK(p != nullptr, "host allocation failed (weights)");
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

// The chunk holding address a, or by_base.end().
std::map<uintptr_t, Chunk>::iterator chunk_of(Chunks& c, uintptr_t a) {
  auto it = c.by_base.upper_bound(a);
  if (it == c.by_base.begin()) return c.by_base.end();
  --it;
  return a < it->first + it->second.bytes ? it : c.by_base.end();
}

}  // namespace

void* alloc_weights_raw(size_t n_bytes, size_t* rounded) {
  *rounded = n_bytes == 0 ? 64 : (n_bytes + 63) / 64 * 64;
  if (*rounded < kSmallBlock) {
    void* p = std::aligned_alloc(64, *rounded);
    PREFIXD_CHECK(p != nullptr, "host allocation failed (weights)");
    return p;
  }
  Chunks& c = chunks();
  std::lock_guard lock(c.mu);
  if (*rounded > kOwnChunk) {
    // Its own chunk, whole huge pages; the pages past *rounded are never touched.
    const size_t bytes = (*rounded + kHugePage - 1) / kHugePage * kHugePage;
    void* p = new_chunk(bytes);
    c.by_base[reinterpret_cast<uintptr_t>(p)] = Chunk{bytes, bytes, 1};
    return p;
  }
  auto cur = c.by_base.find(c.current);
  if (cur == c.by_base.end() || cur->second.bytes - cur->second.used < *rounded) {
    // A new current chunk; the old one is freed with its last block.
    void* p = new_chunk(kChunkBytes);
    c.current = reinterpret_cast<uintptr_t>(p);
    cur = c.by_base.emplace(c.current, Chunk{kChunkBytes, 0, 0}).first;
  }
  void* block = reinterpret_cast<void*>(cur->first + cur->second.used);
  cur->second.used += *rounded;
  ++cur->second.live;
  return block;
}

void* alloc_weights(size_t n_bytes) {
  size_t rounded = 0;
  void* p = alloc_weights_raw(n_bytes, &rounded);
  std::memset(p, 0, rounded);
  return p;
}

void free_weights(void* p) {
  if (p == nullptr) return;
  Chunks& c = chunks();
  std::lock_guard lock(c.mu);
  auto it = chunk_of(c, reinterpret_cast<uintptr_t>(p));
  if (it == c.by_base.end()) {
    std::free(p);  // a small block, or alloc_aligned's
    return;
  }
  if (--it->second.live > 0) return;
  if (it->first == c.current) {
    it->second.used = 0;  // empty: kept, and carved again from the start
    return;
  }
  std::free(reinterpret_cast<void*>(it->first));
  c.by_base.erase(it);
}

size_t weight_chunks() {
  Chunks& c = chunks();
  std::lock_guard lock(c.mu);
  return c.by_base.size();
}

}  // namespace prefixd::cpu
