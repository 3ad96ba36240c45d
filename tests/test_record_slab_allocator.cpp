// Tests for RecordSlabAllocator: fixed slots reused in LIFO order, requests
// larger than a slot passed to the upstream allocator, reserve() growing the
// slabs ahead of use, and retire() waiting for the last outstanding record.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "storage/record_slab_allocator.h"

using namespace prefixd;

namespace {

// An upstream allocator that counts what passes through it.
struct CountingUpstream {
  int allocs = 0;
  int frees = 0;
  HostAllocator allocator() {
    HostAllocator a;
    a.ctx = this;
    a.alloc = [](size_t n, void* ctx) {
      static_cast<CountingUpstream*>(ctx)->allocs++;
      return std::malloc(n);
    };
    a.free = [](void* p, size_t, void* ctx) {
      static_cast<CountingUpstream*>(ctx)->frees++;
      std::free(p);
    };
    return a;
  }
};

}  // namespace

TEST_CASE("slots are distinct, writable, 64-byte aligned and reused after free") {
  RecordSlabAllocator slabs(1000, default_host_allocator(), 1 << 20);
  CHECK(slabs.slot_bytes() == 1024);
  HostAllocator a = slabs.allocator();
  std::set<void*> seen;
  std::vector<void*> ptrs;
  for (int i = 0; i < 3000; ++i) {  // several slabs' worth
    void* p = a.alloc(1000, a.ctx);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    std::memset(p, i & 0xFF, 1000);
    CHECK(seen.insert(p).second);
    ptrs.push_back(p);
  }
  const size_t reserved = slabs.reserved_bytes();
  CHECK(reserved >= 3000u * 1024u);
  void* last = ptrs.back();
  a.free(last, 1000, a.ctx);
  CHECK(a.alloc(1000, a.ctx) == last);  // the freed slot comes back first
  for (void* p : ptrs) a.free(p, 1000, a.ctx);
  for (int i = 0; i < 3000; ++i) CHECK(seen.count(a.alloc(1000, a.ctx)) == 1);  // no new memory
  CHECK(slabs.reserved_bytes() == reserved);
  // Leave them out: retire() below must not unmap while records live.
}

TEST_CASE("requests larger than a slot go to the upstream allocator; slabs come from it too") {
  CountingUpstream up;
  {
    RecordSlabAllocator slabs(4096, up.allocator(), 1 << 20);
    HostAllocator a = slabs.allocator();
    void* big = a.alloc(8192, a.ctx);
    CHECK(up.allocs == 1);
    void* small = a.alloc(4096, a.ctx);
    CHECK(up.allocs == 2);  // the first slab
    a.free(big, 8192, a.ctx);
    CHECK(up.frees == 1);
    a.free(small, 4096, a.ctx);
  }
  CHECK(up.frees == 2);  // the slab, at destruction
}

TEST_CASE("reserve grows the slabs ahead of use and honours its stop flag") {
  RecordSlabAllocator slabs(4096, default_host_allocator(), 2 << 20);
  slabs.reserve(5 << 20);
  CHECK(slabs.reserved_bytes() >= (5u << 20));
  const size_t before = slabs.reserved_bytes();
  std::atomic<bool> stop{true};
  slabs.reserve(64 << 20, &stop);
  CHECK(slabs.reserved_bytes() == before);
}

TEST_CASE("a retired allocator lives until its last record is freed") {
  CountingUpstream up;
  auto* slabs = new RecordSlabAllocator(4096, up.allocator(), 1 << 20);
  HostAllocator a = slabs->allocator();
  void* p = a.alloc(4096, a.ctx);
  std::memset(p, 7, 4096);
  RecordSlabAllocator::retire(slabs);  // a record is out: nothing is freed yet
  CHECK(up.frees == 0);
  CHECK(static_cast<unsigned char*>(p)[4095] == 7);
  a.free(p, 4096, a.ctx);  // the last record: the allocator goes, and its slab
  CHECK(up.frees == 1);
  auto* empty = new RecordSlabAllocator(4096, up.allocator(), 1 << 20);
  RecordSlabAllocator::retire(empty);  // nothing out: destroyed at once (no slab to free)
  CHECK(up.frees == 1);
}
