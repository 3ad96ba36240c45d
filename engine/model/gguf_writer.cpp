// GGUF serialisation: header, metadata, tensor infos, then the data section
// with every tensor aligned. Layout matches ggml's gguf.c (v2 and v3 differ
// only in the version number for little-endian files).
#include "engine/model/gguf_writer.h"

#include <cstring>

#include "common/private_files.h"

namespace prefixd {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kDefaultAlignment = 32;

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

GgufValue scalar(GgufType t) {
  GgufValue v;
  v.type = t;
  return v;
}

GgufValue array_of(GgufType elem_type, size_t n) {
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.elem_type = elem_type;
  v.array.resize(n, scalar(elem_type));
  return v;
}

}  // namespace

void append_gguf_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void append_gguf_value(std::vector<uint8_t>& out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::UINT8: put<uint8_t>(out, static_cast<uint8_t>(v.u)); return;
    case GgufType::INT8: put<int8_t>(out, static_cast<int8_t>(v.i)); return;
    case GgufType::UINT16: put<uint16_t>(out, static_cast<uint16_t>(v.u)); return;
    case GgufType::INT16: put<int16_t>(out, static_cast<int16_t>(v.i)); return;
    case GgufType::UINT32: put<uint32_t>(out, static_cast<uint32_t>(v.u)); return;
    case GgufType::INT32: put<int32_t>(out, static_cast<int32_t>(v.i)); return;
    case GgufType::UINT64: put<uint64_t>(out, v.u); return;
    case GgufType::INT64: put<int64_t>(out, v.i); return;
    case GgufType::FLOAT32: put<float>(out, static_cast<float>(v.f)); return;
    case GgufType::FLOAT64: put<double>(out, v.f); return;
    case GgufType::BOOL: put<uint8_t>(out, v.u != 0 ? 1 : 0); return;
    case GgufType::STRING: append_gguf_string(out, v.str); return;
    case GgufType::ARRAY:
      put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
      put<uint64_t>(out, v.array.size());
      for (const GgufValue& e : v.array) {
        PREFIXD_CHECK(e.type == v.elem_type, "GGUF array element type differs from elem_type");
        append_gguf_value(out, e);
      }
      return;
  }
  PREFIXD_CHECK(false, "unknown GgufType in append_gguf_value");
}

GgufWriter::GgufWriter(uint32_t version, uint64_t alignment)
    : version_(version), alignment_(alignment) {
  PREFIXD_CHECK(version == 2 || version == 3, "GgufWriter writes GGUF versions 2 and 3");
  PREFIXD_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0 && alignment <= 65536,
                "GGUF alignment must be a power of two <= 65536");
}

void GgufWriter::set(const std::string& key, const GgufValue& value) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = value;
      return;
    }
  }
  kv_.emplace_back(key, value);
}

void GgufWriter::set_string(const std::string& key, const std::string& s) {
  GgufValue v = scalar(GgufType::STRING);
  v.str = s;
  set(key, v);
}

void GgufWriter::set_u32(const std::string& key, uint32_t x) {
  GgufValue v = scalar(GgufType::UINT32);
  v.u = x;
  v.i = x;
  set(key, v);
}

void GgufWriter::set_i32(const std::string& key, int32_t x) {
  GgufValue v = scalar(GgufType::INT32);
  v.i = x;
  v.u = static_cast<uint64_t>(x);
  set(key, v);
}

void GgufWriter::set_f32(const std::string& key, float x) {
  GgufValue v = scalar(GgufType::FLOAT32);
  v.f = x;
  set(key, v);
}

void GgufWriter::set_bool(const std::string& key, bool x) {
  GgufValue v = scalar(GgufType::BOOL);
  v.u = x ? 1 : 0;
  set(key, v);
}

void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& xs) {
  GgufValue v = array_of(GgufType::STRING, xs.size());
  for (size_t k = 0; k < xs.size(); ++k) v.array[k].str = xs[k];
  set(key, v);
}

void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& xs) {
  GgufValue v = array_of(GgufType::FLOAT32, xs.size());
  for (size_t k = 0; k < xs.size(); ++k) v.array[k].f = xs[k];
  set(key, v);
}

void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& xs) {
  GgufValue v = array_of(GgufType::INT32, xs.size());
  for (size_t k = 0; k < xs.size(); ++k) {
    v.array[k].i = xs[k];
    v.array[k].u = static_cast<uint64_t>(xs[k]);
  }
  set(key, v);
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type,
                            const std::vector<int64_t>& dims, std::vector<uint8_t> data) {
  PREFIXD_CHECK(!dims.empty() && dims.size() <= 4, "a GGUF tensor has 1..4 dimensions");
  int64_t n = 1;
  for (int64_t d : dims) {
    PREFIXD_CHECK(d > 0, "GGUF tensor dimensions must be positive");
    n *= d;
  }
  PREFIXD_CHECK(data.size() == ggml_type_bytes(type, n), "tensor data size does not match its shape");
  for (const Tensor& t : tensors_) PREFIXD_CHECK(t.name != name, "duplicate tensor name");
  tensors_.push_back(Tensor{name, type, dims, std::move(data)});
}

namespace {

// Header, metadata and tensor infos, padded to the alignment; `offsets`
// receives each tensor's offset inside the data section.
std::vector<uint8_t> serialise_header(uint32_t version, uint64_t alignment,
                                      const std::vector<std::pair<std::string, GgufValue>>& kv_in,
                                      const std::vector<std::string>& names,
                                      const std::vector<GgmlType>& types,
                                      const std::vector<const std::vector<int64_t>*>& dims,
                                      const std::vector<uint64_t>& sizes) {
  // The writer's alignment is authoritative for general.alignment.
  std::vector<std::pair<std::string, GgufValue>> kv = kv_in;
  GgufValue a = scalar(GgufType::UINT32);
  a.u = alignment;
  a.i = static_cast<int64_t>(alignment);
  bool found = false;
  for (auto& [k, v] : kv) {
    if (k == "general.alignment") {
      v = a;
      found = true;
    }
  }
  if (!found && alignment != kDefaultAlignment) kv.emplace_back("general.alignment", a);

  std::vector<uint8_t> out;
  put<uint32_t>(out, kMagic);
  put<uint32_t>(out, version);
  put<uint64_t>(out, names.size());
  put<uint64_t>(out, kv.size());
  for (const auto& [k, v] : kv) {
    append_gguf_string(out, k);
    put<uint32_t>(out, static_cast<uint32_t>(v.type));
    append_gguf_value(out, v);
  }
  uint64_t offset = 0;
  for (size_t t = 0; t < names.size(); ++t) {
    append_gguf_string(out, names[t]);
    put<uint32_t>(out, static_cast<uint32_t>(dims[t]->size()));
    for (int64_t d : *dims[t]) put<uint64_t>(out, static_cast<uint64_t>(d));
    put<uint32_t>(out, static_cast<uint32_t>(types[t]));
    put<uint64_t>(out, offset);
    offset += align_up(sizes[t], alignment);
  }
  out.resize(align_up(out.size(), alignment), 0);
  return out;
}

}  // namespace

std::vector<uint8_t> GgufWriter::header_bytes() const {
  std::vector<std::string> names;
  std::vector<GgmlType> types;
  std::vector<const std::vector<int64_t>*> dims;
  std::vector<uint64_t> sizes;
  for (const Tensor& t : tensors_) {
    names.push_back(t.name);
    types.push_back(t.type);
    dims.push_back(&t.dims);
    sizes.push_back(t.data.size());
  }
  return serialise_header(version_, alignment_, kv_, names, types, dims, sizes);
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out = header_bytes();
  // Each tensor is followed by zero padding up to the alignment (the last one too, as ggml does).
  for (const Tensor& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize(align_up(out.size(), alignment_), 0);
  }
  return out;
}

Status GgufWriter::write_file(const std::string& path) const {
  const std::vector<uint8_t> header = header_bytes();

  // A random 0600 name next to `path` (mkstemp), renamed over it once synced;
  // removed again on any failure (PrivateTempFile's destructor).
  Result<PrivateTempFile> tmp = PrivateTempFile::create(path);
  if (!tmp.ok()) return tmp.status();
  // Tensor data is written straight from each tensor's buffer: no copy of the whole file.
  if (Status s = tmp->write(header.data(), header.size()); !s.ok()) return s;
  static const uint8_t kZeros[65536] = {};
  for (const Tensor& t : tensors_) {
    if (Status s = tmp->write(t.data.data(), t.data.size()); !s.ok()) return s;
    uint64_t pad = align_up(t.data.size(), alignment_) - t.data.size();
    if (Status s = tmp->write(kZeros, pad); !s.ok()) return s;
  }
  return tmp->commit();
}

}  // namespace prefixd
