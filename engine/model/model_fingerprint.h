// Model fingerprint: an XXH3-128 hash of everything in a GGUF file that shapes
// computation (metadata except descriptive general.* keys, tensor infos and
// tensor data), cached on disk so a restart does not rehash the weights.
#pragma once

#include <cstdint>
#include <string>

#include "common/hash128.h"
#include "common/result.h"
#include "engine/model/gguf.h"

namespace prefixd {

// What is hashed, in order (all integers little-endian):
//   "prefixd-model-fingerprint-v1" | file version (u32) | alignment (u64)
//   | for each hashed metadata key in file order: key (u64 len + bytes),
//     value type (u32), value in GGUF encoding
//   | n_tensors (u64) | for each tensor in file order: name (u64 len + bytes),
//     n_dims (u32), dims (u64 each), type (u32), n_bytes (u64), data bytes.
// Hashed metadata: every key outside `general.*`, plus general.architecture and
// general.alignment. Excluded (descriptive, never shape computation): all other
// general.* keys — name, basename, finetune, description, author, organization,
// version, url, doi, uuid, repo_url, license*, source.*, base_model.*, tags,
// languages, datasets, size_label, quantized_by, file_type,
// quantization_version. Tensor offsets are not hashed (layout only); tensor
// data is. So any weight byte change or change of a shaping key changes it.
bool fingerprint_hashes_key(const std::string& key);

// The fingerprint of `file`. When `file` was opened from a path and
// `cache_dir` is non-empty, the result is cached in
// `cache_dir`/fingerprints/<xxh64 of the key>, where the key is the absolute
// path, size, mtime (ns), inode and device; a later call with an unchanged file reads
// it instead of hashing. A missing or unwritable cache dir only disables
// caching. Fails only if the file's tensors cannot be read (never, for a
// parsed GgufFile). Thread-safe (cache writes are atomic renames).
Result<Hash128> model_fingerprint(const GgufFile& file, const std::string& cache_dir);

// The fingerprint computed from the file's bytes, without any cache.
Hash128 compute_model_fingerprint(const GgufFile& file);

}  // namespace prefixd
