// libFuzzer target for the GGUF parser: parses arbitrary bytes, walks every
// metadata value, reads every tensor byte and dequantizes every tensor of
// every weight type row by row (so AddressSanitizer checks the bounds the
// parser promised, and the block decoders on arbitrary bits), then checks that writing the parsed file back
// with GgufWriter is a fixed point (write -> parse -> write gives the same bytes).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "kernels/quant/dequantize.h"

namespace {

using namespace prefixd;

uint64_t walk(const GgufValue& v, int depth) {
  if (depth > 16) __builtin_trap();  // the parser limits nesting
  uint64_t h = static_cast<uint64_t>(v.type) + v.u + static_cast<uint64_t>(v.i) + v.str.size();
  for (char c : v.str) h = h * 31 + static_cast<unsigned char>(c);
  for (const GgufValue& e : v.array) {
    if (e.type != v.elem_type) __builtin_trap();
    h = h * 131 + walk(e, depth + 1);
  }
  return h;
}

std::vector<uint8_t> rewrite(const GgufFile& f) {
  GgufWriter w(f.version(), f.alignment());
  for (const auto& [key, value] : f.metadata()) w.set(key, value);
  for (const GgufTensorInfo& t : f.tensors()) {
    w.add_tensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  return w.to_bytes();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = GgufFile::parse(data, size);
  if (!r.ok()) {
    if (r.message().empty()) __builtin_trap();
    return 0;
  }
  const GgufFile& f = **r;
  volatile uint64_t sink = 0;
  for (const auto& [key, value] : f.metadata()) {
    sink = sink + walk(value, 0) + key.size();
    if (f.find(key) != &value) __builtin_trap();
    // Typed getters must answer (value or error) for every key.
    (void)f.get_string(key);
    (void)f.get_uint(key);
    (void)f.get_float(key);
    (void)f.get_bool(key);
    (void)f.get_string_array(key);
    (void)f.get_float_array(key);
    (void)f.get_int_array(key);
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) __builtin_trap();
    if (t.data < data || t.n_bytes > size || t.data + t.n_bytes > data + size) __builtin_trap();
    if (t.n_bytes != ggml_type_bytes(t.type, t.n_elements())) __builtin_trap();
    uint64_t h = 0;
    for (uint64_t i = 0; i < t.n_bytes; ++i) h += t.data[i];
    sink = sink + h;
    // Every row through the block decoder (row = dims[0] values, a whole number of blocks).
    const int64_t row = t.dims.empty() ? 1 : t.dims[0];
    if (row % weight_type_traits(t.type).block_elements != 0) __builtin_trap();
    if (row <= (1 << 16)) {
      std::vector<float> out(static_cast<size_t>(row));
      const size_t row_bytes = weight_row_bytes(t.type, row);
      for (int64_t r = 0; r < t.n_elements() / row; ++r) {
        quant::dequantize_row(t.type, t.data + r * row_bytes, out.data(), row);
        sink = sink + static_cast<uint64_t>(out[0] != out[0]);
      }
    }
  }
  // Round trip: the writer's output parses, and rewriting it reproduces it exactly.
  std::vector<uint8_t> once = rewrite(f);
  auto again = GgufFile::parse(once.data(), once.size());
  if (!again.ok()) __builtin_trap();
  if ((*again)->metadata().size() < f.metadata().size()) __builtin_trap();
  if ((*again)->tensors().size() != f.tensors().size()) __builtin_trap();
  if (rewrite(**again) != once) __builtin_trap();
  return 0;
}
