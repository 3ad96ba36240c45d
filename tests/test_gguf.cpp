// GGUF reader and writer: round trips of every value type, alignment, tensor
// data, truncation at every length, corrupt fields, and the shared models.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "tests/shared_dir.h"

using namespace prefixd;

namespace {

GgufValue val(GgufType t) {
  GgufValue v;
  v.type = t;
  return v;
}
GgufValue uval(GgufType t, uint64_t x) {
  GgufValue v = val(t);
  v.u = x;
  v.i = static_cast<int64_t>(x);
  return v;
}
GgufValue ival(GgufType t, int64_t x) {
  GgufValue v = val(t);
  v.i = x;
  v.u = static_cast<uint64_t>(x);
  return v;
}
GgufValue fval(GgufType t, double x) {
  GgufValue v = val(t);
  v.f = x;
  return v;
}
GgufValue sval(const std::string& s) {
  GgufValue v = val(GgufType::STRING);
  v.str = s;
  return v;
}
GgufValue arr(GgufType elem, std::vector<GgufValue> xs) {
  GgufValue v = val(GgufType::ARRAY);
  v.elem_type = elem;
  v.array = std::move(xs);
  return v;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& xs) {
  std::vector<uint8_t> b(xs.size() * 4);
  std::memcpy(b.data(), xs.data(), b.size());
  return b;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

Result<std::shared_ptr<GgufFile>> parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::parse(bytes.data(), bytes.size());
}

// Byte offset of the first occurrence of `needle` (a GGUF string's bytes).
size_t find_bytes(const std::vector<uint8_t>& hay, const std::string& needle) {
  for (size_t i = 0; i + needle.size() <= hay.size(); ++i) {
    if (std::memcmp(hay.data() + i, needle.data(), needle.size()) == 0) return i;
  }
  FAIL("bytes not found: " << needle);
  return 0;
}

template <typename T>
void poke(std::vector<uint8_t>& b, size_t off, T v) {
  REQUIRE(off + sizeof(T) <= b.size());
  std::memcpy(b.data() + off, &v, sizeof(T));
}

template <typename T>
T peek(const std::vector<uint8_t>& b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

// Parsing must fail, with a message containing every `parts` entry.
void expect_error(const std::vector<uint8_t>& bytes, std::initializer_list<const char*> parts) {
  auto r = parse(bytes);
  REQUIRE_FALSE(r.ok());
  for (const char* p : parts) CHECK_MESSAGE(r.message().find(p) != std::string::npos, r.message());
}

// A small valid file: a few keys of different types and two tensors. The last
// tensor is exactly 32 bytes, so the file has no trailing padding.
std::vector<uint8_t> small_file(uint32_t version = 3, uint64_t alignment = 32) {
  GgufWriter w(version, alignment);
  w.set_string("general.architecture", "llama");
  w.set_u32("k.u32", 7);
  w.set_bool("k.bool", true);
  w.set_f32("k.f32", 1.5f);
  w.set_string_array("k.strs", {"ab", "c"});
  w.set_i32_array("k.ints", {-1, 2});
  w.add_tensor("w.a", GgmlType::F32, {4, 4}, pattern(64, 1));
  w.add_tensor("w.b", GgmlType::F32, {8}, pattern(32, 2));
  return w.to_bytes();
}

// Offset of the tensor-info field after tensor `name`'s name (its n_dims).
size_t tensor_info_offset(const std::vector<uint8_t>& b, const std::string& name) {
  // The info's name string is preceded by its u64 length; metadata never uses these names.
  return find_bytes(b, name) + name.size();
}

}  // namespace

TEST_CASE("writer round trip preserves every metadata value type, v2 and v3") {
  for (uint32_t version : {2u, 3u}) {
    CAPTURE(version);
    GgufWriter w(version);
    w.set("t.u8", uval(GgufType::UINT8, 250));
    w.set("t.i8", ival(GgufType::INT8, -120));
    w.set("t.u16", uval(GgufType::UINT16, 65000));
    w.set("t.i16", ival(GgufType::INT16, -32000));
    w.set_u32("t.u32", 4000000000u);
    w.set_i32("t.i32", -2000000000);
    w.set("t.u64", uval(GgufType::UINT64, 0xFEDCBA9876543210ull));
    w.set("t.i64", ival(GgufType::INT64, -0x123456789ABCDEFll));
    w.set_f32("t.f32", 0.1f);
    w.set("t.f64", fval(GgufType::FLOAT64, 0.1));
    w.set_bool("t.true", true);
    w.set_bool("t.false", false);
    w.set_string("t.str", std::string("caf\xC3\xA9 \xE2\x96\x81x\0y", 11));
    w.set_string("t.empty", "");
    w.set_string_array("t.strs", {"a", "", "\xE2\x96\x81the"});
    w.set_f32_array("t.f32s", {1.0f, -2.5f, 1e-30f});
    w.set_i32_array("t.i32s", {-5, 0, 2147483647});
    w.set("t.u8s", arr(GgufType::UINT8, {uval(GgufType::UINT8, 0), uval(GgufType::UINT8, 255)}));
    w.set("t.bools", arr(GgufType::BOOL, {uval(GgufType::BOOL, 1), uval(GgufType::BOOL, 0)}));
    w.set("t.f64s", arr(GgufType::FLOAT64, {fval(GgufType::FLOAT64, 1e300)}));
    w.set("t.empty_arr", arr(GgufType::INT64, {}));
    w.set("t.nested_strs", arr(GgufType::ARRAY, {arr(GgufType::STRING, {sval("x"), sval("yz")}),
                                                 arr(GgufType::STRING, {})}));
    w.set("t.nested_ints",
          arr(GgufType::ARRAY, {arr(GgufType::INT16, {ival(GgufType::INT16, -3)}),
                                arr(GgufType::UINT64, {uval(GgufType::UINT64, 1ull << 63)})}));
    w.set("t.nested_floats",
          arr(GgufType::ARRAY,
              {arr(GgufType::ARRAY, {arr(GgufType::FLOAT32, {fval(GgufType::FLOAT32, 0.25)})})}));
    std::vector<uint8_t> bytes = w.to_bytes();
    auto r = parse(bytes);
    REQUIRE_MESSAGE(r.ok(), r.message());
    const GgufFile& f = **r;
    CHECK(f.version() == version);
    CHECK(f.alignment() == 32);
    CHECK(f.find("general.alignment") == nullptr);
    REQUIRE(f.metadata().size() == 24);
    CHECK(f.metadata()[0].first == "t.u8");
    CHECK(f.metadata()[23].first == "t.nested_floats");

    CHECK(f.find("t.u8")->type == GgufType::UINT8);
    CHECK(*f.get_uint("t.u8") == 250);
    CHECK(f.find("t.i8")->type == GgufType::INT8);
    CHECK(f.find("t.i8")->i == -120);
    CHECK(*f.get_uint("t.u16") == 65000);
    CHECK(f.find("t.i16")->i == -32000);
    CHECK(*f.get_uint("t.u32") == 4000000000u);
    CHECK(f.find("t.i32")->type == GgufType::INT32);
    CHECK(f.find("t.i32")->i == -2000000000);
    CHECK(*f.get_uint("t.u64") == 0xFEDCBA9876543210ull);
    CHECK(f.find("t.i64")->i == -0x123456789ABCDEFll);
    CHECK(f.find("t.f32")->type == GgufType::FLOAT32);
    CHECK(*f.get_float("t.f32") == static_cast<double>(0.1f));
    CHECK(f.find("t.f64")->type == GgufType::FLOAT64);
    CHECK(*f.get_float("t.f64") == 0.1);
    CHECK(*f.get_bool("t.true") == true);
    CHECK(*f.get_bool("t.false") == false);
    CHECK(*f.get_string("t.str") == std::string("caf\xC3\xA9 \xE2\x96\x81x\0y", 11));
    CHECK(*f.get_string("t.empty") == "");
    CHECK(*f.get_string_array("t.strs") ==
          std::vector<std::string>{"a", "", "\xE2\x96\x81the"});
    CHECK(*f.get_float_array("t.f32s") == std::vector<float>{1.0f, -2.5f, 1e-30f});
    CHECK(*f.get_int_array("t.i32s") == std::vector<int64_t>{-5, 0, 2147483647});
    CHECK(*f.get_int_array("t.u8s") == std::vector<int64_t>{0, 255});
    const GgufValue* bools = f.find("t.bools");
    REQUIRE(bools->array.size() == 2);
    CHECK(bools->elem_type == GgufType::BOOL);
    CHECK(bools->array[0].u == 1);
    CHECK(bools->array[1].u == 0);
    CHECK(f.find("t.f64s")->array[0].f == 1e300);
    CHECK(f.find("t.empty_arr")->type == GgufType::ARRAY);
    CHECK(f.find("t.empty_arr")->elem_type == GgufType::INT64);
    CHECK(f.find("t.empty_arr")->array.empty());

    const GgufValue* ns = f.find("t.nested_strs");
    REQUIRE(ns->elem_type == GgufType::ARRAY);
    REQUIRE(ns->array.size() == 2);
    CHECK(ns->array[0].elem_type == GgufType::STRING);
    REQUIRE(ns->array[0].array.size() == 2);
    CHECK(ns->array[0].array[1].str == "yz");
    CHECK(ns->array[1].array.empty());
    const GgufValue* ni = f.find("t.nested_ints");
    CHECK(ni->array[0].elem_type == GgufType::INT16);
    CHECK(ni->array[0].array[0].i == -3);
    CHECK(ni->array[1].elem_type == GgufType::UINT64);
    CHECK(ni->array[1].array[0].u == (1ull << 63));
    const GgufValue* nf = f.find("t.nested_floats");
    CHECK(nf->array[0].array[0].array[0].type == GgufType::FLOAT32);
    CHECK(nf->array[0].array[0].array[0].f == 0.25);

    // Wrong-type getters name the key.
    auto bad = f.get_string("t.u8");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.message().find("t.u8") != std::string::npos);
    CHECK_FALSE(f.get_uint("t.absent").ok());
  }
}

TEST_CASE("writer header bytes follow the GGUF layout") {
  GgufWriter w(2);
  w.set_u32("a", 5);
  w.add_tensor("t", GgmlType::F32, {2}, f32_bytes({1.0f, 2.0f}));
  std::vector<uint8_t> b = w.to_bytes();
  CHECK(std::memcmp(b.data(), "GGUF", 4) == 0);
  CHECK(peek<uint32_t>(b, 4) == 2);
  CHECK(peek<uint64_t>(b, 8) == 1);   // n_tensors
  CHECK(peek<uint64_t>(b, 16) == 1);  // n_kv
  CHECK(peek<uint64_t>(b, 24) == 1);  // key length
  CHECK(b[32] == 'a');
  CHECK(peek<uint32_t>(b, 33) == static_cast<uint32_t>(GgufType::UINT32));
  CHECK(peek<uint32_t>(b, 37) == 5);
  CHECK(peek<uint64_t>(b, 41) == 1);  // tensor name length
  CHECK(b[49] == 't');
  CHECK(peek<uint32_t>(b, 50) == 1);  // n_dims
  CHECK(peek<uint64_t>(b, 54) == 2);  // ne[0]
  CHECK(peek<uint32_t>(b, 62) == 0);  // F32
  CHECK(peek<uint64_t>(b, 66) == 0);  // offset
  // Info ends at 74, data starts at 96; 8 bytes of data padded to 32.
  REQUIRE(b.size() == 128);
  CHECK(peek<float>(b, 96) == 1.0f);
  CHECK(peek<float>(b, 100) == 2.0f);
  for (size_t i = 74; i < 96; ++i) CHECK(b[i] == 0);
  for (size_t i = 104; i < 128; ++i) CHECK(b[i] == 0);
}

TEST_CASE("setting a key twice replaces the value in place") {
  GgufWriter w;
  w.set_u32("a", 1);
  w.set_string("b", "x");
  w.set_string("a", "now a string");
  auto r = parse(w.to_bytes());
  REQUIRE(r.ok());
  REQUIRE((*r)->metadata().size() == 2);
  CHECK((*r)->metadata()[0].first == "a");
  CHECK(*(*r)->get_string("a") == "now a string");
}

TEST_CASE("custom alignment writes general.alignment and aligns every tensor") {
  for (uint64_t alignment : {1ull, 8ull, 64ull, 256ull, 4096ull}) {
    CAPTURE(alignment);
    GgufWriter w(3, alignment);
    w.set_string("general.architecture", "llama");
    w.add_tensor("a", GgmlType::F32, {3}, f32_bytes({1, 2, 3}));
    w.add_tensor("b", GgmlType::F16, {5}, pattern(10, 9));
    w.add_tensor("c", GgmlType::F32, {1}, f32_bytes({4}));
    std::vector<uint8_t> bytes = w.to_bytes();
    CHECK(bytes.size() % alignment == 0);
    auto r = parse(bytes);
    REQUIRE_MESSAGE(r.ok(), r.message());
    const GgufFile& f = **r;
    CHECK(f.alignment() == alignment);
    if (alignment == 32) {
      CHECK(f.find("general.alignment") == nullptr);
    } else {
      REQUIRE(f.find("general.alignment") != nullptr);
      CHECK(f.find("general.alignment")->type == GgufType::UINT32);
      CHECK(*f.get_uint("general.alignment") == alignment);
    }
    CHECK(f.data_offset() % alignment == 0);
    for (const GgufTensorInfo& t : f.tensors()) {
      CHECK(t.offset % alignment == 0);
      CHECK(static_cast<uint64_t>(t.data - f.bytes()) % alignment == 0);
    }
    CHECK(std::memcmp(f.find_tensor("b")->data, pattern(10, 9).data(), 10) == 0);
    CHECK(peek<float>(bytes, f.find_tensor("c")->data - f.bytes()) == 4.0f);
  }
}

TEST_CASE("general.alignment set by the caller is overridden by the writer's alignment") {
  GgufWriter w(3, 64);
  w.set_u32("general.alignment", 16);
  auto r = parse(w.to_bytes());
  REQUIRE(r.ok());
  CHECK((*r)->alignment() == 64);
  CHECK((*r)->metadata().size() == 1);
}

TEST_CASE("tensor data pointers, shapes and sizes for F32, F16, BF16 and Q8_0") {
  GgufWriter w;
  struct Spec {
    const char* name;
    GgmlType type;
    std::vector<int64_t> dims;
  };
  std::vector<Spec> specs = {
      {"f32.1d", GgmlType::F32, {7}},
      {"f16.2d", GgmlType::F16, {3, 5}},
      {"bf16.3d", GgmlType::BF16, {2, 3, 4}},
      {"q8.2d", GgmlType::Q8_0, {64, 3}},
      {"f32.4d", GgmlType::F32, {2, 1, 3, 2}},
  };
  std::vector<std::vector<uint8_t>> datas;
  for (size_t k = 0; k < specs.size(); ++k) {
    int64_t n = 1;
    for (int64_t d : specs[k].dims) n *= d;
    datas.push_back(pattern(ggml_type_bytes(specs[k].type, n), static_cast<uint8_t>(k * 31)));
    w.add_tensor(specs[k].name, specs[k].type, specs[k].dims, datas.back());
  }
  std::vector<uint8_t> bytes = w.to_bytes();
  auto r = parse(bytes);
  REQUIRE_MESSAGE(r.ok(), r.message());
  const GgufFile& f = **r;
  REQUIRE(f.tensors().size() == specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    CAPTURE(specs[k].name);
    const GgufTensorInfo* t = f.find_tensor(specs[k].name);
    REQUIRE(t != nullptr);
    CHECK(t == &f.tensors()[k]);
    CHECK(t->type == specs[k].type);
    CHECK(t->dims == specs[k].dims);
    CHECK(t->n_bytes == datas[k].size());
    CHECK(t->data == f.bytes() + f.data_offset() + t->offset);
    CHECK(std::memcmp(t->data, datas[k].data(), datas[k].size()) == 0);
  }
  CHECK(f.find_tensor("f32.1d")->n_elements() == 7);
  CHECK(f.find_tensor("bf16.3d")->n_elements() == 24);
  CHECK(f.find_tensor("q8.2d")->n_bytes == 6 * 34);
  CHECK(f.find_tensor("absent") == nullptr);
}

TEST_CASE("ggml_type_bytes and names of every supported type") {
  CHECK(ggml_type_bytes(GgmlType::F32, 10) == 40);
  CHECK(ggml_type_bytes(GgmlType::F16, 10) == 20);
  CHECK(ggml_type_bytes(GgmlType::BF16, 10) == 20);
  CHECK(ggml_type_bytes(GgmlType::Q8_0, 32) == 34);
  CHECK(ggml_type_bytes(GgmlType::Q8_0, 96) == 102);
  CHECK(ggml_type_bytes(GgmlType::Q4_0, 64) == 36);
  CHECK(ggml_type_bytes(GgmlType::Q4_K, 512) == 288);
  CHECK(ggml_type_bytes(GgmlType::Q6_K, 256) == 210);
  CHECK(ggml_type_bytes(GgmlType::IQ4_XS, 256) == 136);
  CHECK(std::string(ggml_type_name(GgmlType::Q5_K)) == "Q5_K");
  CHECK(std::string(ggml_type_name(GgmlType::IQ4_NL)) == "IQ4_NL");
  CHECK(std::string(ggml_type_name(GgmlType::F32)) == "F32");
  CHECK(std::string(ggml_type_name(GgmlType::F16)) == "F16");
  CHECK(std::string(ggml_type_name(GgmlType::BF16)) == "BF16");
  CHECK(std::string(ggml_type_name(GgmlType::Q8_0)) == "Q8_0");
}

TEST_CASE("truncating a valid file at every length fails with the field and byte offset") {
  const char* fields[] = {"magic", "version", "tensor count", "metadata count", "metadata key",
                          "metadata value type", "value of", "array", "tensor name",
                          "tensor dimension", "tensor type", "tensor data", "tensor '"};
  for (uint32_t version : {2u, 3u}) {
    std::vector<uint8_t> full = small_file(version);
    REQUIRE(parse(full).ok());
    for (size_t len = 0; len < full.size(); ++len) {
      CAPTURE(len);
      // An exact-size heap copy, so a sanitizer sees any read past the end.
      std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
      auto r = GgufFile::parse(cut.empty() ? nullptr : cut.data(), cut.size());
      REQUIRE_FALSE(r.ok());
      const std::string& m = r.message();
      CHECK_MESSAGE(m.find("byte offset") != std::string::npos, m);
      bool names_field = false;
      for (const char* field : fields) names_field |= m.find(field) != std::string::npos;
      CHECK_MESSAGE(names_field, m);
    }
  }
}

TEST_CASE("corrupt headers are refused with clear messages") {
  const std::vector<uint8_t> good = small_file();
  REQUIRE(parse(good).ok());
  SUBCASE("bad magic") {
    std::vector<uint8_t> b = good;
    b[0] = 'X';
    expect_error(b, {"bad magic", "byte offset 0"});
  }
  SUBCASE("version 1 and 4") {
    for (uint32_t v : {0u, 1u, 4u, 0xFFFFFFFFu}) {
      std::vector<uint8_t> b = good;
      poke<uint32_t>(b, 4, v);
      expect_error(b, {"unsupported GGUF version", "byte offset 4"});
    }
  }
  SUBCASE("absurd metadata count") {
    for (uint64_t n : {1ull << 60, ~0ull, 1000000ull}) {
      std::vector<uint8_t> b = good;
      poke<uint64_t>(b, 16, n);
      expect_error(b, {"metadata count", "byte offset 16"});
    }
  }
  SUBCASE("absurd tensor count") {
    std::vector<uint8_t> b = good;
    poke<uint64_t>(b, 8, 1ull << 62);
    expect_error(b, {"tensor count", "byte offset 8"});
  }
  SUBCASE("huge key length") {
    std::vector<uint8_t> b = good;
    poke<uint64_t>(b, 24, 1ull << 62);
    expect_error(b, {"string length", "metadata key", "byte offset 24"});
  }
  SUBCASE("huge string value length") {
    std::vector<uint8_t> b = good;
    size_t key = find_bytes(b, "general.architecture");
    size_t len_off = key + 20 + 4;
    REQUIRE(peek<uint64_t>(b, len_off) == 5);
    poke<uint64_t>(b, len_off, 0xFFFFFFFFFFFFull);
    expect_error(b, {"string length", "general.architecture",
                     ("byte offset " + std::to_string(len_off)).c_str()});
  }
  SUBCASE("huge array length") {
    std::vector<uint8_t> b = good;
    size_t len_off = find_bytes(b, "k.strs") + 6 + 4 + 4;
    REQUIRE(peek<uint64_t>(b, len_off) == 2);
    poke<uint64_t>(b, len_off, 1ull << 40);
    expect_error(b, {"array length", ("byte offset " + std::to_string(len_off)).c_str()});
  }
  SUBCASE("unknown metadata value type") {
    std::vector<uint8_t> b = good;
    size_t type_off = find_bytes(b, "k.u32") + 5;
    poke<uint32_t>(b, type_off, 13);
    expect_error(b, {"unknown value type 13", "k.u32",
                     ("byte offset " + std::to_string(type_off)).c_str()});
  }
  SUBCASE("unknown array element type") {
    std::vector<uint8_t> b = good;
    size_t elem_off = find_bytes(b, "k.ints") + 6 + 4;
    poke<uint32_t>(b, elem_off, 99);
    expect_error(b, {"unknown array element type 99", "k.ints"});
  }
  SUBCASE("bool other than 0 or 1") {
    std::vector<uint8_t> b = good;
    size_t off = find_bytes(b, "k.bool") + 6 + 4;
    REQUIRE(b[off] == 1);
    b[off] = 2;
    expect_error(b, {"bool", "k.bool", ("byte offset " + std::to_string(off)).c_str()});
  }
  SUBCASE("duplicate metadata key") {
    std::vector<uint8_t> b = good;
    size_t off = find_bytes(b, "k.f32");
    std::memcpy(b.data() + off, "k.u32", 5);
    expect_error(b, {"duplicate metadata key 'k.u32'"});
  }
  SUBCASE("huge n_dims") {
    for (uint32_t nd : {0u, 5u, 0xFFFFFFFFu}) {
      std::vector<uint8_t> b = good;
      size_t off = tensor_info_offset(b, "w.a");
      poke<uint32_t>(b, off, nd);
      expect_error(b, {"dimensions", "w.a", ("byte offset " + std::to_string(off)).c_str()});
    }
  }
  SUBCASE("zero or huge dimension") {
    for (uint64_t ne : {0ull, 1ull << 41, ~0ull}) {
      std::vector<uint8_t> b = good;
      size_t off = tensor_info_offset(b, "w.a") + 4;
      poke<uint64_t>(b, off, ne);
      expect_error(b, {"dimension", "out of range", ("byte offset " + std::to_string(off)).c_str()});
    }
  }
  SUBCASE("element count overflowing through the product of dimensions") {
    GgufWriter w;
    w.add_tensor("t", GgmlType::F32, {1, 1, 1, 1}, pattern(4, 0));
    std::vector<uint8_t> b = w.to_bytes();
    size_t off = tensor_info_offset(b, "t") + 4;
    for (int d = 0; d < 4; ++d) poke<uint64_t>(b, off + 8 * d, 1ull << 20);
    expect_error(b, {"out of range"});
  }
  SUBCASE("unknown tensor type") {
    // 4, 5: removed from ggml; 9: Q8_1 (activations only); 16: IQ2_XXS (not supported).
    for (uint32_t t : {4u, 5u, 9u, 16u, 31u, 1000u}) {
      std::vector<uint8_t> b = good;
      size_t off = tensor_info_offset(b, "w.a") + 4 + 16;
      REQUIRE(peek<uint32_t>(b, off) == 0);
      poke<uint32_t>(b, off, t);
      expect_error(b, {"unsupported type", "w.a", ("byte offset " + std::to_string(off)).c_str()});
    }
  }
  SUBCASE("tensor offset beyond the file") {
    std::vector<uint8_t> b = good;
    size_t off = tensor_info_offset(b, "w.b") + 4 + 8 + 4;
    REQUIRE(peek<uint64_t>(b, off) == 64);
    poke<uint64_t>(b, off, 1ull << 40);
    expect_error(b, {"tensor 'w.b'", "extends beyond the end"});
    poke<uint64_t>(b, off, 96);  // data would end 32 bytes past the end
    expect_error(b, {"tensor 'w.b'", "extends beyond the end"});
    poke<uint64_t>(b, off, ~0ull - 31);  // offset + size overflows 64 bits
    expect_error(b, {"tensor 'w.b'", "extends beyond the end"});
  }
  SUBCASE("misaligned tensor offset") {
    std::vector<uint8_t> b = good;
    size_t off = tensor_info_offset(b, "w.b") + 4 + 8 + 4;
    poke<uint64_t>(b, off, 65);
    expect_error(b, {"not a multiple of the alignment 32", "w.b",
                     ("byte offset " + std::to_string(off)).c_str()});
  }
  SUBCASE("overlapping tensors") {
    std::vector<uint8_t> b = good;
    size_t off = tensor_info_offset(b, "w.b") + 4 + 8 + 4;
    poke<uint64_t>(b, off, 32);  // w.a covers [0, 64)
    expect_error(b, {"overlaps", "byte offset"});
    poke<uint64_t>(b, off, 0);  // the same bytes
    expect_error(b, {"overlaps", "byte offset"});
  }
  SUBCASE("duplicate tensor names") {
    std::vector<uint8_t> b = good;
    size_t off = find_bytes(b, "w.b");
    b[off + 2] = 'a';
    expect_error(b, {"duplicate tensor 'w.a'", "byte offset"});
  }
  SUBCASE("bad general.alignment value") {
    std::vector<uint8_t> b = small_file(3, 64);
    REQUIRE(parse(b).ok());
    size_t off = find_bytes(b, "general.alignment") + 17 + 4;
    REQUIRE(peek<uint32_t>(b, off) == 64);
    for (uint32_t a : {0u, 48u, 1u << 20}) {
      poke<uint32_t>(b, off, a);
      expect_error(b, {"general.alignment"});
    }
  }
  SUBCASE("arrays nested too deep") {
    GgufValue v = arr(GgufType::UINT8, {uval(GgufType::UINT8, 1)});
    for (int d = 0; d < 6; ++d) v = arr(GgufType::ARRAY, {v});
    GgufWriter w;
    w.set("deep", v);
    expect_error(w.to_bytes(), {"nested deeper", "deep"});
  }
  SUBCASE("Q8_0 row not a multiple of 32") {
    GgufWriter w;
    w.add_tensor("q", GgmlType::Q8_0, {64}, pattern(68, 0));
    std::vector<uint8_t> b = w.to_bytes();
    poke<uint64_t>(b, tensor_info_offset(b, "q") + 4, 48);
    expect_error(b, {"Q8_0", "'q'", "48 elements", "multiple of its block of 32"});
  }
}

// GGUF bytes written by hand (no GgufValue trees, so a test can declare
// millions of elements without first building them): a v3 header and
// metadata only; `n_kv` is patched in by bytes().
struct RawGguf {
  std::vector<uint8_t> out;
  uint64_t n_kv = 0;

  RawGguf() {
    put<uint32_t>(0x46554747);  // "GGUF"
    put<uint32_t>(3);
    put<uint64_t>(0);  // tensors
    put<uint64_t>(0);  // metadata count, set by bytes()
  }
  template <typename T>
  void put(T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
  }
  // Starts an array entry; returns the byte offset of its length field.
  size_t begin_array(const std::string& key, GgufType elem, uint64_t n) {
    ++n_kv;
    append_gguf_string(out, key);
    put<uint32_t>(static_cast<uint32_t>(GgufType::ARRAY));
    put<uint32_t>(static_cast<uint32_t>(elem));
    const size_t len_off = out.size();
    put<uint64_t>(n);
    return len_off;
  }
  // A uint8 array of n zero bytes; returns the offset of its length field.
  size_t u8_array(const std::string& key, uint64_t n) {
    const size_t len_off = begin_array(key, GgufType::UINT8, n);
    out.resize(out.size() + n, 0);
    return len_off;
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> b = out;
    std::memcpy(b.data() + 16, &n_kv, sizeof(n_kv));
    return b;
  }
};

TEST_CASE("a uint8 array that fits the file but not the metadata memory limit is refused") {
  // 4 MiB of uint8 in the file passes the bytes-left check, but each element
  // is a whole GgufValue in memory: 4 Mi x sizeof(GgufValue) is 384 MiB.
  const uint64_t n = 4ull << 20;
  RawGguf g;
  const size_t len_off = g.u8_array("x.big", n);
  const std::vector<uint8_t> b = g.bytes();
  REQUIRE(n <= b.size() - len_off - 8);  // the bytes-left check passes
  auto r = parse(b);
  REQUIRE_FALSE(r.ok());
  const std::string at = "(array length at byte offset " + std::to_string(len_off) + ")";
  const std::string memory = std::to_string(n * sizeof(GgufValue)) + " bytes in memory (" +
                             std::to_string(sizeof(GgufValue)) + " each)";
  CHECK(r.message() == "metadata array 'x.big' declares 4194304 uint8 elements " + at +
                           ", which take " + memory +
                           ": the file's metadata would exceed its limit of 268435456 bytes "
                           "(256 MiB)");

  // A quarter of it (96 MiB in memory) still parses.
  RawGguf small;
  small.u8_array("x.big", n / 4);
  auto ok = parse(small.bytes());
  REQUIRE_MESSAGE(ok.ok(), ok.message());
  CHECK((*ok)->find("x.big")->array.size() == n / 4);
}

TEST_CASE("a 4 GiB uint8 array declared in a 1 MiB file is refused before any allocation") {
  RawGguf g;
  const size_t len_off = g.begin_array("x.huge", GgufType::UINT8, 4ull << 30);
  g.out.resize(1u << 20, 0);  // the file is 1 MiB in all
  auto r = parse(g.bytes());
  REQUIRE_FALSE(r.ok());
  INFO(r.message());
  CHECK(r.message().find("'x.huge'") != std::string::npos);
  CHECK(r.message().find("4294967296") != std::string::npos);
  CHECK(r.message().find(std::to_string(len_off)) != std::string::npos);
}

TEST_CASE("the metadata memory limit is for the whole file, not each array") {
  // Two arrays that each fit (1.4 Mi elements) but not together: the second is refused.
  const uint64_t n = 1400ull << 10;
  REQUIRE(n * sizeof(GgufValue) < (256ull << 20));
  REQUIRE(2 * n * sizeof(GgufValue) > (256ull << 20));
  RawGguf g;
  g.u8_array("x.first", n);
  const size_t second = g.u8_array("x.second", n);
  auto r = parse(g.bytes());
  REQUIRE_FALSE(r.ok());
  const std::string head =
      "metadata array 'x.second' declares 1433600 uint8 elements (array "
      "length at byte offset " +
      std::to_string(second) + ")";
  CHECK(r.message().rfind(head, 0) == 0);
  CHECK(r.message().find("268435456 bytes (256 MiB)") != std::string::npos);

  // Nested: the elements of inner arrays count too.
  RawGguf nested;
  nested.begin_array("x.nested", GgufType::ARRAY, 2);
  for (int k = 0; k < 2; ++k) {
    nested.put<uint32_t>(static_cast<uint32_t>(GgufType::UINT8));
    nested.put<uint64_t>(n);
    nested.out.resize(nested.out.size() + n, 0);
  }
  auto rn = parse(nested.bytes());
  REQUIRE_FALSE(rn.ok());
  CHECK(rn.message().rfind("metadata array 'x.nested' declares 1433600 uint8 elements", 0) == 0);
}

TEST_CASE("a metadata count whose entries would exceed the metadata memory limit is refused") {
  // 2,000,000 entries fit a 16 MiB file's bytes (8 each) but not 256 MiB of memory.
  RawGguf g;
  g.out.resize(g.out.size() + (16u << 20), 0);
  std::vector<uint8_t> b = g.bytes();
  poke<uint64_t>(b, 16, 2000000);
  expect_error(b, {"metadata count 2000000 at byte offset 16 needs ",
                   "bytes in memory: the file's metadata would exceed its limit of 268435456 "
                   "bytes (256 MiB)"});
}

TEST_CASE("a 262144-token vocabulary with scores, token types and merges loads") {
  const uint64_t n_vocab = 262144;
  RawGguf g;
  g.begin_array("tokenizer.ggml.tokens", GgufType::STRING, n_vocab);
  for (uint64_t t = 0; t < n_vocab; ++t) append_gguf_string(g.out, "tok" + std::to_string(t));
  g.begin_array("tokenizer.ggml.scores", GgufType::FLOAT32, n_vocab);
  for (uint64_t t = 0; t < n_vocab; ++t) g.put<float>(-static_cast<float>(t));
  g.begin_array("tokenizer.ggml.token_type", GgufType::INT32, n_vocab);
  for (uint64_t t = 0; t < n_vocab; ++t) g.put<int32_t>(1);
  g.begin_array("tokenizer.ggml.merges", GgufType::STRING, n_vocab);
  for (uint64_t t = 0; t < n_vocab; ++t) append_gguf_string(g.out, "t " + std::to_string(t));
  auto r = parse(g.bytes());
  REQUIRE_MESSAGE(r.ok(), r.message());
  const GgufFile& f = **r;
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  REQUIRE(tokens.ok());
  CHECK(tokens->size() == n_vocab);
  CHECK(tokens->back() == "tok262143");
  CHECK(f.get_float_array("tokenizer.ggml.scores")->size() == n_vocab);
  CHECK(f.get_int_array("tokenizer.ggml.token_type")->size() == n_vocab);
  CHECK(f.get_string_array("tokenizer.ggml.merges")->size() == n_vocab);
}

TEST_CASE("open reports a missing file and an empty file") {
  auto missing = GgufFile::open("/nonexistent/prefixd/model.gguf");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message().find("/nonexistent/prefixd/model.gguf") != std::string::npos);
  std::string empty = std::string(PREFIXD_BUILD_DIR) + "/test_gguf_empty.gguf";
  {
    FILE* f = std::fopen(empty.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fclose(f);
  }
  auto r = GgufFile::open(empty);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("empty") != std::string::npos);
  std::remove(empty.c_str());
}

TEST_CASE("write_file produces the same bytes as to_bytes and open maps them") {
  GgufWriter w(3, 64);
  w.set_string("general.architecture", "llama");
  w.add_tensor("x", GgmlType::BF16, {33}, pattern(66, 5));
  std::string path = std::string(PREFIXD_BUILD_DIR) + "/test_gguf_write_file.gguf";
  REQUIRE(w.write_file(path).ok());
  auto r = GgufFile::open(path);
  REQUIRE_MESSAGE(r.ok(), r.message());
  std::vector<uint8_t> expect = w.to_bytes();
  REQUIRE((*r)->size_bytes() == expect.size());
  CHECK(std::memcmp((*r)->bytes(), expect.data(), expect.size()) == 0);
  CHECK((*r)->path() == path);
  CHECK(std::memcmp((*r)->find_tensor("x")->data, pattern(66, 5).data(), 66) == 0);
  std::remove(path.c_str());
  // An unwritable destination is an error, not a crash.
  Status s = w.write_file("/nonexistent-dir/prefixd/x.gguf");
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("/nonexistent-dir/prefixd/x.gguf") != std::string::npos);
}

TEST_CASE("stories260K opens with the README's hyper-parameters") {
  auto r = GgufFile::open(prefixd::testing::shared_dir() + "/models/stories260K.gguf");
  REQUIRE_MESSAGE(r.ok(), r.message());
  const GgufFile& f = **r;
  CHECK(f.version() == 3);
  CHECK(*f.get_string("general.architecture") == "llama");
  CHECK(*f.get_uint("llama.block_count") == 5);
  CHECK(*f.get_uint("llama.embedding_length") == 64);
  CHECK(*f.get_uint("llama.feed_forward_length") == 172);
  CHECK(*f.get_uint("llama.attention.head_count") == 8);
  CHECK(*f.get_uint("llama.attention.head_count_kv") == 4);
  CHECK(*f.get_uint("llama.rope.dimension_count") == 8);
  CHECK(*f.get_uint("llama.context_length") == 512);
  CHECK(f.find("llama.rope.freq_base") == nullptr);
  CHECK(*f.get_float("llama.attention.layer_norm_rms_epsilon") == doctest::Approx(1e-5));
  CHECK(*f.get_string("tokenizer.ggml.model") == "llama");
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  REQUIRE(tokens.ok());
  CHECK(tokens->size() == 512);
  CHECK((*tokens)[0] == "<unk>");
  CHECK((*tokens)[3] == "<0x00>");
  CHECK(f.get_float_array("tokenizer.ggml.scores")->size() == 512);
  CHECK(f.get_int_array("tokenizer.ggml.token_type")->size() == 512);
  CHECK(f.tensors().size() == 48);
  for (const GgufTensorInfo& t : f.tensors()) CHECK(t.type == GgmlType::F32);
  CHECK(f.find_tensor("token_embd.weight")->dims == std::vector<int64_t>{64, 512});
  CHECK(f.find_tensor("blk.4.ffn_down.weight")->dims == std::vector<int64_t>{172, 64});
  CHECK(f.find_tensor("blk.0.attn_k.weight")->dims == std::vector<int64_t>{64, 32});
  // Tied: the converter stored output.weight as a byte copy of token_embd.weight.
  const GgufTensorInfo* out = f.find_tensor("output.weight");
  REQUIRE(out != nullptr);
  const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  CHECK(std::memcmp(out->data, emb->data, emb->n_bytes) == 0);
}

TEST_CASE("rand-mqa-f16 opens with the README's hyper-parameters") {
  auto r = GgufFile::open(prefixd::testing::shared_dir() + "/models/rand-mqa-f16.gguf");
  REQUIRE_MESSAGE(r.ok(), r.message());
  const GgufFile& f = **r;
  CHECK(*f.get_string("general.architecture") == "llama");
  CHECK(*f.get_uint("llama.block_count") == 2);
  CHECK(*f.get_uint("llama.embedding_length") == 256);
  CHECK(*f.get_uint("llama.feed_forward_length") == 704);
  CHECK(*f.get_uint("llama.attention.head_count") == 4);
  CHECK(*f.get_uint("llama.attention.head_count_kv") == 1);
  CHECK(*f.get_uint("llama.rope.dimension_count") == 64);
  CHECK(*f.get_uint("llama.context_length") == 4096);
  CHECK(*f.get_float("llama.rope.freq_base") == 500000.0);
  CHECK(*f.get_uint("llama.vocab_size") == 1024);
  CHECK(*f.get_bool("tokenizer.ggml.add_bos_token") == true);
  CHECK(f.find_tensor("output.weight") != nullptr);  // untied
  CHECK(f.find_tensor("output.weight")->type == GgmlType::F16);
  CHECK(f.find_tensor("blk.0.attn_k.weight")->dims == std::vector<int64_t>{256, 64});
  CHECK(f.find_tensor("blk.1.ffn_norm.weight")->type == GgmlType::F32);
  CHECK(f.find_tensor("blk.1.ffn_up.weight")->type == GgmlType::F16);
  CHECK(f.tensors().size() == 21);
}

TEST_CASE("rand-qwen2-bf16 opens with the README's hyper-parameters") {
  auto r = GgufFile::open(prefixd::testing::shared_dir() + "/models/rand-qwen2-bf16.gguf");
  REQUIRE_MESSAGE(r.ok(), r.message());
  const GgufFile& f = **r;
  CHECK(*f.get_string("general.architecture") == "qwen2");
  CHECK(*f.get_uint("qwen2.block_count") == 2);
  CHECK(*f.get_uint("qwen2.embedding_length") == 256);
  CHECK(*f.get_uint("qwen2.feed_forward_length") == 512);
  CHECK(*f.get_uint("qwen2.attention.head_count") == 2);
  CHECK(*f.get_uint("qwen2.attention.head_count_kv") == 2);
  CHECK(*f.get_uint("qwen2.rope.dimension_count") == 128);
  CHECK(*f.get_uint("qwen2.context_length") == 4096);
  CHECK(*f.get_float("qwen2.rope.freq_base") == 1e6);
  CHECK(*f.get_float("qwen2.attention.layer_norm_rms_epsilon") == doctest::Approx(1e-6));
  CHECK(*f.get_uint("qwen2.vocab_size") == 1024);
  CHECK(f.find_tensor("output.weight") == nullptr);  // tied
  CHECK(f.find_tensor("blk.0.attn_q.bias")->type == GgmlType::F32);
  CHECK(f.find_tensor("blk.0.attn_q.bias")->dims == std::vector<int64_t>{256});
  CHECK(f.find_tensor("blk.0.attn_q.weight")->type == GgmlType::BF16);
  CHECK(f.find_tensor("token_embd.weight")->dims == std::vector<int64_t>{256, 1024});
}
