// Slab allocator for block records (see record_slab_allocator.h).
#include "storage/record_slab_allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace prefixd {

namespace {

constexpr size_t kHugePage = 2ull << 20;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

RecordSlabAllocator::RecordSlabAllocator(size_t slot_bytes, HostAllocator upstream, size_t slab_bytes)
    : slot_bytes_(round_up(slot_bytes == 0 ? 64 : slot_bytes, 64)),
      slab_bytes_(std::max(round_up(slab_bytes, kHugePage) / slot_bytes_, size_t{1}) * slot_bytes_),
      upstream_(upstream),
      use_mmap_(upstream.alloc == default_host_allocator().alloc) {}

RecordSlabAllocator::~RecordSlabAllocator() {
  for (const Slab& s : slabs_) {
    if (s.mapped) {
      munmap(s.base, s.n_bytes);
    } else {
      upstream_.free(s.base, s.n_bytes, upstream_.ctx);
    }
  }
}

void RecordSlabAllocator::retire(RecordSlabAllocator* allocator) {
  if (allocator == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(allocator->mu_);
    if (allocator->n_outstanding_ > 0) {
      allocator->retired_ = true;
      return;
    }
  }
  delete allocator;
}

HostAllocator RecordSlabAllocator::allocator() {
  HostAllocator a;
  a.ctx = this;
  a.alloc = [](size_t n, void* ctx) { return static_cast<RecordSlabAllocator*>(ctx)->alloc(n); };
  a.free = [](void* p, size_t n, void* ctx) { static_cast<RecordSlabAllocator*>(ctx)->free(p, n); };
  return a;
}

size_t RecordSlabAllocator::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const Slab& s : slabs_) n += s.n_bytes;
  return n;
}

bool RecordSlabAllocator::make_slab(Slab* out) {
  Slab s{nullptr, slab_bytes_, use_mmap_};
  if (use_mmap_) {
    // Over-allocate by a huge page so the slab can start on a 2 MiB boundary.
    const size_t mapped = slab_bytes_ + kHugePage;
    void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = round_up(begin, kHugePage);
    if (aligned > begin) munmap(p, aligned - begin);
    const size_t tail = mapped - (aligned - begin) - slab_bytes_;
    if (tail > 0) munmap(reinterpret_cast<void*>(aligned + slab_bytes_), tail);
    s.base = reinterpret_cast<void*>(aligned);
    madvise(s.base, slab_bytes_, MADV_HUGEPAGE);  // advice only: fine if refused
#ifdef MADV_POPULATE_WRITE
    // Fault the whole slab in with one call (Linux 5.14+; advice only).
    madvise(s.base, slab_bytes_, MADV_POPULATE_WRITE);
#endif
  } else {
    s.base = upstream_.alloc(slab_bytes_, upstream_.ctx);
    if (s.base == nullptr) return false;
  }
  *out = s;
  return true;
}

void RecordSlabAllocator::adopt(const Slab& s) {
  slabs_.push_back(s);
  auto* base = static_cast<uint8_t*>(s.base);
  for (size_t off = slab_bytes_; off >= slot_bytes_; off -= slot_bytes_) {
    free_slots_.push_back(base + off - slot_bytes_);  // popped lowest address first
  }
}

bool RecordSlabAllocator::add_slab() {
  Slab s;
  if (!make_slab(&s)) return false;
  adopt(s);
  return true;
}

void RecordSlabAllocator::reserve(size_t n_bytes, const std::atomic<bool>* stop) {
  for (;;) {
    if (stop != nullptr && stop->load()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      size_t reserved = 0;
      for (const Slab& s : slabs_) reserved += s.n_bytes;
      if (reserved >= n_bytes) return;
    }
    Slab s;
    if (!make_slab(&s)) return;
    std::lock_guard<std::mutex> lock(mu_);
    adopt(s);
  }
}

void* RecordSlabAllocator::alloc(size_t n_bytes) {
  void* p = nullptr;
  if (n_bytes > slot_bytes_) {
    p = upstream_.alloc(n_bytes, upstream_.ctx);
    if (p == nullptr) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    ++n_outstanding_;
    return p;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (free_slots_.empty() && !add_slab()) return nullptr;
  p = free_slots_.back();
  free_slots_.pop_back();
  ++n_outstanding_;
  return p;
}

void RecordSlabAllocator::free(void* ptr, size_t n_bytes) {
  if (ptr == nullptr) return;
  if (n_bytes > slot_bytes_) upstream_.free(ptr, n_bytes, upstream_.ctx);
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (n_bytes <= slot_bytes_) free_slots_.push_back(ptr);
    --n_outstanding_;
    last = retired_ && n_outstanding_ == 0;
  }
  if (last) delete this;
}

}  // namespace prefixd
