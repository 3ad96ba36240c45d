// RecordSlabAllocator: fixed-size slots for block records, carved from large
// slabs. Every record of one geometry has the same size, so slots are reused
// without returning to the kernel: no page faults after the first fill, and
// the first fill touches 2 MiB huge pages (MADV_HUGEPAGE) instead of 4 KiB ones.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

#include "storage/block_record.h"

namespace prefixd {

// Thread-safe. Slabs come from `upstream` (pinned memory on CUDA) or, when
// upstream is the default malloc allocator, from mmap with MADV_HUGEPAGE.
// Requests larger than slot_bytes go to upstream directly. Slabs are kept
// until the allocator is destroyed. Records may outlive their owner (a test
// or an engine still holding one): the owner calls retire(), which destroys
// the allocator at once or, if slots are still out, when the last is freed.
class RecordSlabAllocator {
 public:
  RecordSlabAllocator(size_t slot_bytes, HostAllocator upstream, size_t slab_bytes = 32ull << 20);
  static void retire(RecordSlabAllocator* allocator);
  struct Retire {
    void operator()(RecordSlabAllocator* a) const { retire(a); }
  };
  ~RecordSlabAllocator();  // use retire() while records may be out
  RecordSlabAllocator(const RecordSlabAllocator&) = delete;
  RecordSlabAllocator& operator=(const RecordSlabAllocator&) = delete;

  // A HostAllocator whose ctx is this object.
  HostAllocator allocator();
  // Adds slabs until at least `n_bytes` are reserved, faulting their pages in
  // now (on the caller's thread, e.g. a background one) so that later
  // records never page-fault. Stops early when `stop` becomes true.
  void reserve(size_t n_bytes, const std::atomic<bool>* stop = nullptr);

  size_t slot_bytes() const { return slot_bytes_; }
  size_t reserved_bytes() const;  // bytes of all slabs

 private:
  void* alloc(size_t n_bytes);
  void free(void* ptr, size_t n_bytes);
  bool add_slab();  // under mu_
  struct Slab;
  bool make_slab(Slab* out);  // maps (or gets from upstream) and faults in one slab; no lock
  void adopt(const Slab& slab);  // under mu_: keeps the slab, frees its slots

  struct Slab {
    void* base;
    size_t n_bytes;
    bool mapped;  // mmap'd (else from upstream)
  };

  const size_t slot_bytes_;      // record size rounded up to 64 bytes
  const size_t slab_bytes_;      // a multiple of slot_bytes_, at least one slot
  const HostAllocator upstream_;
  const bool use_mmap_;
  mutable std::mutex mu_;
  std::vector<void*> free_slots_;
  std::vector<Slab> slabs_;
  size_t n_outstanding_ = 0;  // allocations not yet freed
  bool retired_ = false;      // the owner is gone: the last free destroys this
};

}  // namespace prefixd
