// Model fingerprint: canonical re-encoding of the shaping metadata and tensor
// infos, streamed with the tensor data through one XXH3-128 state; results are
// cached per (path, size, mtime, inode) in small text files.
#include "engine/model/model_fingerprint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/private_files.h"
#include "engine/model/gguf_writer.h"

namespace prefixd {
namespace {

constexpr char kDomain[] = "prefixd-model-fingerprint-v1";
constexpr char kCacheHeader[] = "prefixd model fingerprint cache v1";

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

struct FileIdentity {
  std::string abs_path;
  uint64_t size_bytes = 0;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;
  uint64_t device = 0;
};

bool identify(const std::string& path, FileIdentity* id) {
  if (path.empty()) return false;
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) return false;
  struct stat st {};
  if (::stat(abs.c_str(), &st) != 0) return false;
  id->abs_path = abs.lexically_normal().string();
  id->size_bytes = static_cast<uint64_t>(st.st_size);
  id->mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  id->inode = static_cast<uint64_t>(st.st_ino);
  id->device = static_cast<uint64_t>(st.st_dev);
  return true;
}

// The cache file's full text for `id` and `fp`; the lookup compares all of it
// except the last line, so a key-hash collision can never return a wrong value.
std::string cache_text_prefix(const FileIdentity& id) {
  return std::string(kCacheHeader) + "\npath " + id.abs_path + "\nsize " +
         std::to_string(id.size_bytes) + "\nmtime_ns " + std::to_string(id.mtime_ns) +
         "\ninode " + std::to_string(id.inode) + "\ndevice " + std::to_string(id.device) +
         "\nfingerprint ";
}

std::string cache_file_path(const std::string& cache_dir, const FileIdentity& id) {
  std::string key = cache_text_prefix(id);
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(key.data(), key.size())));
  return cache_dir + "/fingerprints/" + name;
}

bool parse_hex64(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

bool read_cache(const std::string& file, const FileIdentity& id, Hash128* fp) {
  FILE* f = std::fopen(file.c_str(), "rb");
  if (f == nullptr) return false;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && text.size() < 65536) text.append(buf, n);
  std::fclose(f);
  const std::string prefix = cache_text_prefix(id);
  if (text.size() != prefix.size() + 33 || text.compare(0, prefix.size(), prefix) != 0 ||
      text.back() != '\n') {
    return false;
  }
  std::string hex = text.substr(prefix.size(), 32);
  return parse_hex64(hex.substr(0, 16), &fp->hi) && parse_hex64(hex.substr(16), &fp->lo);
}

// Best effort: a cache that cannot be written only costs the next start a
// rehash. The directories are made private (0700, this user's, not writable by
// others) first, so nobody else can plant a cache file; the file is written
// under a random 0600 name and renamed into place.
void write_cache(const std::string& cache_dir, const std::string& file, const FileIdentity& id,
                 const Hash128& fp) {
  if (!make_private_dir(cache_dir).ok() || !make_private_dir(cache_dir + "/fingerprints").ok()) {
    return;
  }
  const std::string text = cache_text_prefix(id) + fp.hex() + "\n";
  (void)write_file_atomically(file, text.data(), text.size());
}

}  // namespace

bool fingerprint_hashes_key(const std::string& key) {
  if (key.rfind("general.", 0) != 0) return true;
  return key == "general.architecture" || key == "general.alignment";
}

Hash128 compute_model_fingerprint(const GgufFile& file) {
  XXH3_state_t* state = XXH3_createState();
  PREFIXD_CHECK(state != nullptr, "XXH3_createState failed");
  XXH3_128bits_reset(state);
  std::vector<uint8_t> buf(sizeof(kDomain) - 1);
  std::memcpy(buf.data(), kDomain, buf.size());
  put<uint32_t>(buf, file.version());
  put<uint64_t>(buf, file.alignment());
  for (const auto& [key, value] : file.metadata()) {
    if (!fingerprint_hashes_key(key)) continue;
    append_gguf_string(buf, key);
    put<uint32_t>(buf, static_cast<uint32_t>(value.type));
    append_gguf_value(buf, value);  // the writer's encoding
  }
  put<uint64_t>(buf, file.tensors().size());
  XXH3_128bits_update(state, buf.data(), buf.size());
  for (const GgufTensorInfo& t : file.tensors()) {
    buf.clear();
    append_gguf_string(buf, t.name);
    put<uint32_t>(buf, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) put<uint64_t>(buf, static_cast<uint64_t>(d));
    put<uint32_t>(buf, static_cast<uint32_t>(t.type));
    put<uint64_t>(buf, t.n_bytes);
    XXH3_128bits_update(state, buf.data(), buf.size());
    XXH3_128bits_update(state, t.data, t.n_bytes);
    file.release_pages(t.data, t.n_bytes);  // hashing must not leave the file resident
  }
  XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return Hash128{h.low64, h.high64};
}

Result<Hash128> model_fingerprint(const GgufFile& file, const std::string& cache_dir) {
  FileIdentity id;
  const bool cacheable = !cache_dir.empty() && identify(file.path(), &id) &&
                         id.size_bytes == file.size_bytes();
  std::string cache_file;
  if (cacheable) {
    cache_file = cache_file_path(cache_dir, id);
    Hash128 fp;
    // Only a private directory's answer is trusted: nobody else could have planted it.
    if (check_private_dir(cache_dir + "/fingerprints").ok() && read_cache(cache_file, id, &fp)) {
      return fp;
    }
  }
  Hash128 fp = compute_model_fingerprint(file);
  if (cacheable) write_cache(cache_dir, cache_file, id, fp);
  return fp;
}

}  // namespace prefixd
