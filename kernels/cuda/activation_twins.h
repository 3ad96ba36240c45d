// GEMM inputs written twice: the CUDA backend's GEMMs over F16/BF16 weights
// read their activations in the weight's type, so an F32 activation x needs
// a 16-bit copy ("twin") of the same values, round-to-nearest-even of each F32
// value. Instead of a conversion kernel before every GEMM, the op that writes
// x (rmsnorm, swiglu, geglu) writes the twin too, from the value it stores:
// bit for bit what the conversion would give.
//
// This is the bookkeeping of that, pure C++ (tests/test_decode_graph_plan.cpp
// checks it on the CPU):
//   - a buffer gets a twin (storage the backend allocates) the first time a
//     GEMM converts it, for inputs of at most kTwinRows rows (decode-sized
//     steps; a larger input is converted as before, into a scratch);
//   - the "current" twin: the one buffer whose twin holds its present values.
//     Every backend op forgets it on entry (forget_current) except the GEMMs,
//     which read it; an op that writes a buffer's twin, and a GEMM that
//     converts, make it current. So a twin is used only by the GEMMs right
//     after the op that wrote it, with nothing in between that could have
//     changed the buffer.
//
// Thread: the backend's engine thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/dtype.h"

namespace prefixd::cuda {

class ActivationTwins {
 public:
  // Rows of an input a twin holds (capacity = kTwinRows * the first GEMM's cols).
  static constexpr int64_t kTwinRows = 256;

  struct Twin {
    void* data = nullptr;  // device, (capacity) elements of `type`
    DType type = DType::F16;
    int64_t capacity = 0;  // elements
  };

  // The twin an op writing n elements at `out` should write too, or nullptr
  // (no twin, or too small).
  const Twin* target_for(const float* out, int64_t n) const {
    const Entry* e = find(out);
    return e != nullptr && n <= e->twin.capacity ? &e->twin : nullptr;
  }
  // An op wrote n elements of `out` and of its twin: current.
  void wrote(const float* out, int64_t n, const Twin& twin) {
    current_ = Current{out, n, twin.data, twin.type};
  }
  // A GEMM converted n elements of x into `data` (of `type`): current.
  void converted(const float* x, int64_t n, void* data, DType type) {
    current_ = Current{x, n, data, type};
  }
  // The present values of x's first n elements in `type`, or nullptr.
  const void* current_for(const float* x, int64_t n, DType type) const {
    if (current_.src != x || current_.data == nullptr || current_.n < n || current_.type != type)
      return nullptr;
    return current_.data;
  }
  // Forgets the current twin (every op but the GEMMs, on entry; a GEMM whose
  // output overlaps the current twin's buffer, after it).
  void forget_current() { current_ = Current{}; }
  // Whether [p, p + n_bytes) overlaps the current twin's buffer (its n elements).
  bool overlaps_current(const void* p, size_t n_bytes) const {
    if (current_.src == nullptr) return false;
    const auto* a = static_cast<const char*>(p);
    const auto* b = reinterpret_cast<const char*>(current_.src);
    return a < b + current_.n * static_cast<int64_t>(sizeof(float)) && b < a + n_bytes;
  }

  // Registration: x gets `twin` (storage owned by the caller).
  bool has(const float* x) const { return find(x) != nullptr; }
  void add(const float* x, const Twin& twin) { entries_.push_back(Entry{x, twin}); }
  // Unregisters every twin of a buffer that starts at `p` (it is being freed)
  // and returns their storage for the caller to free.
  std::vector<Twin> remove(const void* p) {
    std::vector<Twin> out;
    for (size_t i = 0; i < entries_.size();) {
      if (entries_[i].src == p) {
        out.push_back(entries_[i].twin);
        entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    if (current_.src == p) forget_current();
    return out;
  }
  std::vector<Twin> remove_all() {
    std::vector<Twin> out;
    for (const Entry& e : entries_) out.push_back(e.twin);
    entries_.clear();
    forget_current();
    return out;
  }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    const float* src;
    Twin twin;
  };
  struct Current {
    const float* src = nullptr;
    int64_t n = 0;  // elements of src (and of data) it holds
    const void* data = nullptr;
    DType type = DType::F16;
  };
  const Entry* find(const void* p) const {
    for (const Entry& e : entries_)
      if (e.src == p) return &e;
    return nullptr;
  }

  std::vector<Entry> entries_;  // a handful: the forward pass's GEMM inputs
  Current current_;
};

}  // namespace prefixd::cuda
