// GGUF parsing: a cursor over untrusted bytes where every read checks bounds
// and every failure names the field being read and its byte offset. Counts
// are checked against the memory they ask for, not only the bytes left.
#include "engine/model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <tuple>
#include <limits>

namespace prefixd {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kMaxStringBytes = 1ull << 30;
constexpr uint64_t kMaxArrayElements = 1ull << 32;
constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayNesting = 4;
// What one file's parsed metadata and tensor infos may take in memory. Counts
// in the file are checked against it before anything is allocated: a count
// that fits the bytes left can still ask for ~100 bytes per byte of file (a
// uint8 array element is a whole GgufValue). A 262144-token vocabulary with
// scores, token types and merges takes well under a third of it.
constexpr uint64_t kMaxMetadataBytes = 256ull << 20;
// A std::map index entry: the key, the index, three links and a colour.
constexpr uint64_t kIndexEntryBytes =
    sizeof(std::pair<const std::string, size_t>) + 4 * sizeof(void*);
constexpr uint64_t kKvEntryBytes = sizeof(std::pair<std::string, GgufValue>) + kIndexEntryBytes;
constexpr uint64_t kTensorInfoBytes =
    sizeof(GgufTensorInfo) + kMaxDims * sizeof(int64_t) + kIndexEntryBytes;

std::string at(const char* field, uint64_t offset) {
  return std::string(field) + " at byte offset " + std::to_string(offset);
}

std::string limit_text() {
  return std::to_string(kMaxMetadataBytes) + " bytes (" + std::to_string(kMaxMetadataBytes >> 20) +
         " MiB)";
}

// The in-memory bytes charged so far against kMaxMetadataBytes.
class MemoryBudget {
 public:
  // Charges n items of item_bytes each; false (nothing charged) when the
  // total would exceed the limit.
  bool take(uint64_t n, uint64_t item_bytes) {
    if (item_bytes != 0 && n > (kMaxMetadataBytes - used_bytes_) / item_bytes) return false;
    used_bytes_ += n * item_bytes;
    return true;
  }

 private:
  uint64_t used_bytes_ = 0;
};

class Cursor {
 public:
  // Strings read are charged to `budget`.
  Cursor(const uint8_t* data, size_t size, MemoryBudget* budget)
      : data_(data), size_(size), budget_(budget) {}
  MemoryBudget& budget() { return *budget_; }
  uint64_t pos() const { return pos_; }
  size_t size() const { return size_; }

  Status read_bytes(void* out, uint64_t n, const char* field) {
    if (n > size_ - pos_) {
      return Status::error("truncated file: " + at(field, pos_) + " needs " + std::to_string(n) +
                           " bytes, " + std::to_string(size_ - pos_) + " left");
    }
    std::memcpy(out, data_ + pos_, n);
    pos_ += n;
    return Status();
  }
  template <typename T>
  Status read(T* out, const char* field) {
    return read_bytes(out, sizeof(T), field);
  }
  Status read_string(std::string* out, const char* field) {
    uint64_t start = pos_;
    uint64_t n = 0;
    if (Status s = read(&n, field); !s.ok()) return s;
    if (n > kMaxStringBytes || n > size_ - pos_) {
      return Status::error("string length " + std::to_string(n) + " of " + at(field, start) +
                           " exceeds the " + std::to_string(size_ - pos_) + " bytes left");
    }
    if (!budget_->take(n, 1)) {
      return Status::error(
          "string length " + std::to_string(n) + " of " + at(field, start) +
          " needs as many bytes in memory: the file's metadata would exceed its limit of " +
          limit_text());
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return Status();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  MemoryBudget* budget_;
  uint64_t pos_ = 0;
};

const char* type_name(GgufType t) {
  switch (t) {
    case GgufType::UINT8: return "uint8";
    case GgufType::INT8: return "int8";
    case GgufType::UINT16: return "uint16";
    case GgufType::INT16: return "int16";
    case GgufType::UINT32: return "uint32";
    case GgufType::INT32: return "int32";
    case GgufType::FLOAT32: return "float32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::UINT64: return "uint64";
    case GgufType::INT64: return "int64";
    case GgufType::FLOAT64: return "float64";
  }
  return "unknown";
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::FLOAT64); }

Status read_value(Cursor& c, GgufType type, GgufValue* v, const std::string& key, int depth);

// An array value (element type, count, elements) of `key` at nesting `depth`,
// into v; f names the field in errors. Its elements count against the
// metadata budget before they are allocated.
Status read_array(Cursor& c, GgufValue* v, const std::string& key, const char* f, int depth) {
  if (depth >= kMaxArrayNesting) {
    return Status::error("arrays nested deeper than " + std::to_string(kMaxArrayNesting) +
                         " in " + at(f, c.pos()));
  }
  uint64_t off = c.pos();
  uint32_t elem = 0;
  if (Status s = c.read(&elem, "array element type"); !s.ok()) return s;
  if (!valid_value_type(elem)) {
    return Status::error("unknown array element type " + std::to_string(elem) + " in " +
                         at(f, off));
  }
  uint64_t count_off = c.pos();
  uint64_t n = 0;
  if (Status s = c.read(&n, "array length"); !s.ok()) return s;
  // Every element takes at least one byte: a count beyond the bytes left is corrupt.
  if (n > kMaxArrayElements || n > c.size() - c.pos()) {
    return Status::error("array length " + std::to_string(n) + " of " +
                         at(f, count_off) + " exceeds the bytes left in the file");
  }
  v->elem_type = static_cast<GgufType>(elem);
  // Each element is a whole GgufValue in memory, whatever its size in the file.
  if (!c.budget().take(n, sizeof(GgufValue))) {
    return Status::error(
        "metadata array '" + key + "' declares " + std::to_string(n) + " " +
        type_name(v->elem_type) + " elements (" + at("array length", count_off) +
        "), which take " + std::to_string(n * sizeof(GgufValue)) + " bytes in memory (" +
        std::to_string(sizeof(GgufValue)) +
        " each): the file's metadata would exceed its limit of " + limit_text());
  }
  v->array.resize(n);
  for (uint64_t k = 0; k < n; ++k) {
    if (Status s = read_value(c, v->elem_type, &v->array[k], key, depth + 1); !s.ok()) return s;
  }
  return Status();
}

Status read_value(Cursor& c, GgufType type, GgufValue* v, const std::string& key, int depth) {
  v->type = type;
  std::string field = "value of '" + key + "'";
  const char* f = field.c_str();
  switch (type) {
    case GgufType::UINT8: { uint8_t x; if (Status s = c.read(&x, f); !s.ok()) return s; v->u = x; v->i = x; return Status(); }
    case GgufType::INT8: { int8_t x; if (Status s = c.read(&x, f); !s.ok()) return s; v->i = x; v->u = static_cast<uint64_t>(x); return Status(); }
    case GgufType::UINT16: { uint16_t x; if (Status s = c.read(&x, f); !s.ok()) return s; v->u = x; v->i = x; return Status(); }
    case GgufType::INT16: { int16_t x; if (Status s = c.read(&x, f); !s.ok()) return s; v->i = x; v->u = static_cast<uint64_t>(x); return Status(); }
    case GgufType::UINT32: { uint32_t x; if (Status s = c.read(&x, f); !s.ok()) return s; v->u = x; v->i = x; return Status(); }
    case GgufType::INT32: { int32_t x; if (Status s = c.read(&x, f); !s.ok()) return s; v->i = x; v->u = static_cast<uint64_t>(x); return Status(); }
    case GgufType::UINT64: { uint64_t x; if (Status s = c.read(&x, f); !s.ok()) return s; v->u = x; v->i = static_cast<int64_t>(x); return Status(); }
    case GgufType::INT64: { int64_t x; if (Status s = c.read(&x, f); !s.ok()) return s; v->i = x; v->u = static_cast<uint64_t>(x); return Status(); }
    case GgufType::FLOAT32: { float x; if (Status s = c.read(&x, f); !s.ok()) return s; v->f = x; return Status(); }
    case GgufType::FLOAT64: { double x; if (Status s = c.read(&x, f); !s.ok()) return s; v->f = x; return Status(); }
    case GgufType::BOOL: {
      uint64_t off = c.pos();
      uint8_t x;
      if (Status s = c.read(&x, f); !s.ok()) return s;
      if (x > 1) return Status::error("bool " + at(f, off) + " is " + std::to_string(x));
      v->u = x;
      return Status();
    }
    case GgufType::STRING: return c.read_string(&v->str, f);
    case GgufType::ARRAY: return read_array(c, v, key, f, depth);
  }
  return Status::error("unknown value type " + std::to_string(static_cast<uint32_t>(type)) +
                       " for " + f);
}

}  // namespace

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

uint64_t ggml_type_bytes(GgmlType type, int64_t n) {
  const WeightTypeTraits& t = weight_type_traits(type);
  return static_cast<uint64_t>(n / t.block_elements) * static_cast<uint64_t>(t.block_bytes);
}

const char* ggml_type_name(GgmlType type) { return weight_type_name(type); }

void GgufFile::release_pages(const uint8_t* data, uint64_t n) const {
  if (mapping_ == nullptr || n == 0) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + n) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void GgufFile::drop_mapping() {
  if (mapping_ == nullptr) return;
  munmap(mapping_, size_);
  mapping_ = nullptr;
  data_ = nullptr;
  for (GgufTensorInfo& t : tensors_) t.data = nullptr;
}

Result<std::shared_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error("cannot open model file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error("model file '" + path + "' is not a regular file");
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return Status::error("model file '" + path + "' is empty (truncated file: magic at byte offset 0)");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return Status::error("cannot mmap '" + path + "': " + std::strerror(errno));
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->data_ = static_cast<const uint8_t*>(map);
  f->size_ = size;
  f->mapping_ = map;
  if (Status s = f->parse_all(); !s.ok()) return Status::error("'" + path + "': " + s.message());
  return f;
}

Result<std::shared_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, size_t size) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->data_ = data;
  f->size_ = size;
  if (Status s = f->parse_all(); !s.ok()) return s;
  return f;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) munmap(mapping_, size_);
}

namespace {

// The fixed header after the magic: format version and the two counts.
struct GgufHeader {
  uint32_t version = 0;
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
};

// Magic, version, tensor and metadata counts (each bounded by what the file can hold).
Status read_header(Cursor& c, GgufHeader* h) {
  uint32_t magic = 0;
  if (Status s = c.read(&magic, "magic"); !s.ok()) return s;
  if (magic != kMagic) return Status::error("not a GGUF file: bad magic at byte offset 0");
  if (Status s = c.read(&h->version, "version"); !s.ok()) return s;
  if (h->version != 2 && h->version != 3) {
    return Status::error("unsupported GGUF version " + std::to_string(h->version) +
                         " at byte offset 4 (supported: 2, 3)");
  }
  if (Status s = c.read(&h->n_tensors, "tensor count"); !s.ok()) return s;
  if (Status s = c.read(&h->n_kv, "metadata count"); !s.ok()) return s;
  // Each entry takes at least 8 bytes (a string length): bound the counts by the file size.
  for (const auto& [n, what, offset] : {std::tuple{h->n_tensors, "tensor count", 8},
                                        std::tuple{h->n_kv, "metadata count", 16}}) {
    if (n > c.size() / 8) {
      return Status::error(std::string(what) + " " + std::to_string(n) + " at byte offset " +
                           std::to_string(offset) + " exceeds what a " + std::to_string(c.size()) +
                           "-byte file can hold");
    }
  }
  return Status();
}

// Charges n entries of entry_bytes each to the cursor's budget before they
// are allocated; the refusal names the count (`what`, read at byte `offset`).
Status charge_entries(Cursor& c, uint64_t n, uint64_t entry_bytes, const char* what, int offset) {
  if (c.budget().take(n, entry_bytes)) return Status();
  return Status::error(std::string(what) + " " + std::to_string(n) + " at byte offset " +
                       std::to_string(offset) + " needs " + std::to_string(n * entry_bytes) +
                       " bytes in memory: the file's metadata would exceed its limit of " + limit_text());
}

using KeyValues = std::vector<std::pair<std::string, GgufValue>>;
using NameIndex = std::map<std::string, size_t, std::less<>>;

// n_kv metadata entries (key, value type, value), charged to the cursor's budget first.
Status read_key_values(Cursor& c, uint64_t n_kv, KeyValues* kv, NameIndex* index) {
  if (Status s = charge_entries(c, n_kv, kKvEntryBytes, "metadata count", 16); !s.ok()) return s;
  kv->reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    uint64_t key_off = c.pos();
    std::string key;
    if (Status s = c.read_string(&key, "metadata key"); !s.ok()) return s;
    if (index->count(key) != 0) {
      return Status::error("duplicate metadata key '" + key + "' " + at("metadata key", key_off));
    }
    uint64_t type_off = c.pos();
    uint32_t type = 0;
    if (Status s = c.read(&type, "metadata value type"); !s.ok()) return s;
    if (!valid_value_type(type)) {
      return Status::error("unknown value type " + std::to_string(type) + " for key '" + key +
                           "' at byte offset " + std::to_string(type_off));
    }
    GgufValue v;
    if (Status s = read_value(c, static_cast<GgufType>(type), &v, key, 0); !s.ok()) return s;
    (*index)[key] = kv->size();
    kv->emplace_back(std::move(key), std::move(v));
  }
  return Status();
}

// A tensor's dimension count and dimensions; *n_elem is their product.
Status read_tensor_dims(Cursor& c, GgufTensorInfo* info, uint64_t* n_elem) {
  uint64_t dims_off = c.pos();
  uint32_t n_dims = 0;
  if (Status s = c.read(&n_dims, "tensor dimension count"); !s.ok()) return s;
  if (n_dims == 0 || n_dims > kMaxDims) {
    return Status::error("tensor '" + info->name + "' has " + std::to_string(n_dims) +
                         " dimensions " + at("tensor dimension count", dims_off) + " (1..4 allowed)");
  }
  *n_elem = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t off = c.pos();
    uint64_t ne = 0;
    if (Status s = c.read(&ne, "tensor dimension"); !s.ok()) return s;
    if (ne == 0 || ne > (1ull << 40) || *n_elem > (1ull << 40) / ne) {
      return Status::error("tensor '" + info->name + "' dimension " + std::to_string(ne) + " " +
                           at("tensor dimension", off) + " is out of range");
    }
    *n_elem *= ne;
    info->dims.push_back(static_cast<int64_t>(ne));
  }
  return Status();
}

// A tensor's weight type: a supported one whose block divides the row.
Status read_tensor_type(Cursor& c, GgufTensorInfo* info) {
  uint64_t type_off = c.pos();
  uint32_t type = 0;
  if (Status s = c.read(&type, "tensor type"); !s.ok()) return s;
  const WeightTypeTraits* traits = weight_type_traits(type);
  if (traits == nullptr || !traits->weight) {
    std::string supported;
    for (const WeightTypeTraits& t : kWeightTypes) {
      if (t.weight) supported += std::string(supported.empty() ? "" : ", ") + t.name;
    }
    return Status::error("tensor '" + info->name + "' has unsupported type " + std::to_string(type) +
                         (traits ? std::string(" (") + traits->name + ")" : std::string()) + " " +
                         at("tensor type", type_off) + " (supported: " + supported + ")");
  }
  info->type = traits->type;
  if (info->dims[0] % traits->block_elements != 0) {
    return Status::error(std::string(traits->name) + " tensor '" + info->name + "' has a row of " +
                         std::to_string(info->dims[0]) + " elements, not a multiple of its block of " +
                         std::to_string(traits->block_elements));
  }
  return Status();
}

// n_tensors tensor infos (name, dims, type, aligned data offset), charged to the budget first.
Status read_tensor_infos(Cursor& c, uint64_t n_tensors, uint64_t alignment,
                         std::vector<GgufTensorInfo>* tensors, NameIndex* index) {
  if (Status s = charge_entries(c, n_tensors, kTensorInfoBytes, "tensor count", 8); !s.ok()) return s;
  tensors->reserve(n_tensors);
  for (uint64_t t = 0; t < n_tensors; ++t) {
    GgufTensorInfo info;
    uint64_t name_off = c.pos();
    if (Status s = c.read_string(&info.name, "tensor name"); !s.ok()) return s;
    if (index->count(info.name) != 0) {
      return Status::error("duplicate tensor '" + info.name + "' " + at("tensor name", name_off));
    }
    uint64_t n_elem = 1;
    if (Status s = read_tensor_dims(c, &info, &n_elem); !s.ok()) return s;
    if (Status s = read_tensor_type(c, &info); !s.ok()) return s;
    uint64_t offset_off = c.pos();
    if (Status s = c.read(&info.offset, "tensor data offset"); !s.ok()) return s;
    if (info.offset % alignment != 0) {
      return Status::error("tensor '" + info.name + "' data offset " + std::to_string(info.offset) + " " +
                           at("tensor data offset", offset_off) + " is not a multiple of the alignment " +
                           std::to_string(alignment));
    }
    info.n_bytes = ggml_type_bytes(info.type, static_cast<int64_t>(n_elem));
    (*index)[info.name] = tensors->size();
    tensors->push_back(std::move(info));
  }
  return Status();
}

// Points each tensor at its bytes in data[0, size), the data section starting at data_start;
// every tensor must lie inside the file, and no two may overlap.
Status place_tensor_data(const uint8_t* data, size_t size, uint64_t data_start,
                         std::vector<GgufTensorInfo>* tensors) {
  if (!tensors->empty() && data_start > size) {
    return Status::error("truncated file: tensor data section starts at byte offset " +
                         std::to_string(data_start) + " beyond the end of the " + std::to_string(size) +
                         "-byte file");
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (GgufTensorInfo& info : *tensors) {
    uint64_t avail = size - std::min<uint64_t>(data_start, size);
    if (info.offset > avail || info.n_bytes > avail - info.offset) {
      return Status::error("truncated file: tensor '" + info.name + "' data [" +
                           std::to_string(data_start + info.offset) + ", " +
                           std::to_string(data_start + info.offset + info.n_bytes) +
                           ") at byte offset " + std::to_string(data_start + info.offset) +
                           " extends beyond the end of the " + std::to_string(size) + "-byte file");
    }
    info.data = data + data_start + info.offset;
    ranges.emplace_back(info.offset, info.offset + info.n_bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return Status::error("tensor data overlaps at byte offset " +
                           std::to_string(data_start + ranges[i].first));
    }
  }
  return Status();
}

}  // namespace

Status GgufFile::parse_all() {
  MemoryBudget budget;
  Cursor c(data_, size_, &budget);
  GgufHeader header;
  if (Status s = read_header(c, &header); !s.ok()) return s;
  version_ = header.version;
  if (Status s = read_key_values(c, header.n_kv, &kv_, &kv_index_); !s.ok()) return s;
  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::UINT32 || a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > 65536) {
      return Status::error("general.alignment must be a power-of-two uint32 <= 65536");
    }
    alignment_ = a->u;
  }
  if (Status s = read_tensor_infos(c, header.n_tensors, alignment_, &tensors_, &tensor_index_);
      !s.ok()) {
    return s;
  }
  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  return place_tensor_data(data_, size_, data_offset_, &tensors_);
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
Status missing(std::string_view key) {
  return Status::error("metadata key '" + std::string(key) + "' is missing");
}
Status wrong_type(std::string_view key, GgufType got, const char* want) {
  return Status::error("metadata key '" + std::string(key) + "' has type " + type_name(got) +
                       ", expected " + want);
}
bool is_int(GgufType t) {
  return t == GgufType::UINT8 || t == GgufType::INT8 || t == GgufType::UINT16 ||
         t == GgufType::INT16 || t == GgufType::UINT32 || t == GgufType::INT32 ||
         t == GgufType::UINT64 || t == GgufType::INT64;
}
bool is_signed(GgufType t) {
  return t == GgufType::INT8 || t == GgufType::INT16 || t == GgufType::INT32 || t == GgufType::INT64;
}
}  // namespace

Result<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(key);
  if (v->type != GgufType::STRING) return wrong_type(key, v->type, "string");
  return v->str;
}

Result<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(key);
  if (!is_int(v->type)) return wrong_type(key, v->type, "an integer");
  if (is_signed(v->type) && v->i < 0) {
    return Status::error("metadata key '" + std::string(key) + "' is negative (" + std::to_string(v->i) + ")");
  }
  return v->u;
}

Result<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(key);
  if (v->type == GgufType::FLOAT32 || v->type == GgufType::FLOAT64) return v->f;
  if (is_int(v->type)) return is_signed(v->type) ? static_cast<double>(v->i) : static_cast<double>(v->u);
  return wrong_type(key, v->type, "a number");
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(key);
  if (v->type != GgufType::BOOL) return wrong_type(key, v->type, "bool");
  return v->u != 0;
}

Result<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(key);
  if (v->type != GgufType::ARRAY || v->elem_type != GgufType::STRING) {
    return wrong_type(key, v->type, "array of strings");
  }
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(e.str);
  return out;
}

Result<std::vector<float>> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(key);
  if (v->type != GgufType::ARRAY ||
      (v->elem_type != GgufType::FLOAT32 && v->elem_type != GgufType::FLOAT64)) {
    return wrong_type(key, v->type, "array of floats");
  }
  std::vector<float> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(static_cast<float>(e.f));
  return out;
}

Result<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(key);
  if (v->type != GgufType::ARRAY || !is_int(v->elem_type)) {
    return wrong_type(key, v->type, "array of integers");
  }
  std::vector<int64_t> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(is_signed(v->elem_type) ? e.i : static_cast<int64_t>(e.u));
  return out;
}

}  // namespace prefixd
