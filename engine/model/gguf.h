// GGUF reader (versions 2 and 3): metadata of every value type, tensor infos,
// alignment, and mmap'd tensor data. Every read is bounds-checked: a truncated,
// corrupt or unsupported file fails with a message naming the field and offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "kernels/quant/weight_type.h"

namespace prefixd {

enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

// GGML tensor types this project reads: the WeightType numbers are GGML's.
using GgmlType = WeightType;

// One metadata value. Scalars are widened: integers to int64/uint64, floats to
// double, bool to uint64 0/1. Arrays keep their element type and elements.
struct GgufValue {
  GgufType type = GgufType::UINT8;
  uint64_t u = 0;        // UINT*, BOOL
  int64_t i = 0;         // INT*
  double f = 0;          // FLOAT*
  std::string str;       // STRING
  GgufType elem_type = GgufType::UINT8;  // ARRAY
  std::vector<GgufValue> array;          // ARRAY
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ne[0] first (the contiguous dimension)
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;        // relative to the data section
  const uint8_t* data = nullptr;  // into the mapping
  uint64_t n_bytes = 0;
  int64_t n_elements() const;
};

// Size in bytes of n elements of a tensor type (n must be a multiple of the
// block size for block types).
uint64_t ggml_type_bytes(GgmlType type, int64_t n_elements);
const char* ggml_type_name(GgmlType type);

class GgufFile {
 public:
  // Maps the file read-only and parses it.
  static Result<std::shared_ptr<GgufFile>> open(const std::string& path);
  // Parses bytes already in memory (used by the fuzzer and tests). The bytes
  // must outlive the returned object.
  static Result<std::shared_ptr<GgufFile>> parse(const uint8_t* data, size_t size);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }
  const uint8_t* bytes() const { return data_; }
  size_t size_bytes() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }

  // Metadata in file order, and lookup by key (nullptr when absent).
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;

  // Typed getters: an absent key or a wrong type fails with a message naming the key.
  Result<std::string> get_string(std::string_view key) const;
  Result<uint64_t> get_uint(std::string_view key) const;   // any integer type >= 0
  Result<double> get_float(std::string_view key) const;    // FLOAT32/FLOAT64 or integer
  Result<bool> get_bool(std::string_view key) const;
  // Arrays: strings, float32 and integer arrays.
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  Result<std::vector<float>> get_float_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;

  // Drops the mapping's resident pages that lie wholly inside [data, data + n)
  // (a tensor already copied out): resident memory stays one copy of the
  // weights. Later reads fault the pages back in from the file. No-op for
  // parse()d bytes.
  void release_pages(const uint8_t* data, uint64_t n) const;

  // Unmaps the file once everything needed from it has been copied out (the
  // weights uploaded, the fingerprint computed): from then on the process
  // never reads the file, so truncating or replacing it while the daemon runs
  // cannot fault (SIGBUS) or change an answer. Metadata stays (it was parsed
  // into copies); tensor data pointers and bytes() become null. No-op for
  // parse()d bytes. Not thread-safe: call it before sharing the file.
  void drop_mapping();

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  Status parse_all();

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;  // non-null when we own an mmap of size_ bytes
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace prefixd
