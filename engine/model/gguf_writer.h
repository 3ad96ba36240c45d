// GGUF writer (version 3 by default, 2 on request): metadata of every value
// type and tensors with alignment. Used by the test-model generator, the demo
// model and test fixtures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "engine/model/gguf.h"

namespace prefixd {

// The GGUF encoding of a string: u64 length, then the bytes. Appended to `out`.
void append_gguf_string(std::vector<uint8_t>& out, const std::string& s);

// The GGUF encoding of a value without its type tag (little-endian); an array
// carries its element type (u32) and count (u64), then each element. The
// writer and the model fingerprint both encode values with it. Aborts on an
// array element whose type differs from the array's elem_type.
void append_gguf_value(std::vector<uint8_t>& out, const GgufValue& value);

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3, uint64_t alignment = 32);

  // Metadata, kept in insertion order. Setting a key twice replaces its value.
  void set(const std::string& key, const GgufValue& value);
  void set_string(const std::string& key, const std::string& v);
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);

  // A tensor: dims ne[0] first; `data` holds ggml_type_bytes(type, n) bytes.
  void add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& dims,
                  std::vector<uint8_t> data);

  // Serialises everything.
  std::vector<uint8_t> to_bytes() const;
  // Writes to `path` atomically (temporary file + rename).
  Status write_file(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
  };
  // Header, metadata and tensor infos, padded to the alignment (the bytes
  // before the first tensor's data).
  std::vector<uint8_t> header_bytes() const;

  uint32_t version_;
  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace prefixd
