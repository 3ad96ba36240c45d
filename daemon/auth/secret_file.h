// Reading a key file: a file that only its owner may read
// (read_private_file in common/private_files.h, FileAccess::kOwnerOnly),
// refused, naming the path and the problem, when it is a symbolic link, not a
// regular file of this user, or open to group or others. --api-key-file
// holds an API key (read_secret_file); --cache-secret-file the deployment
// secret (daemon/deployment_secret.h). Both read it with read_key_file.
#pragma once

#include <cstddef>
#include <string>

#include "common/result.h"

namespace prefixd {

// The largest key file, in bytes.
inline constexpr size_t kMaxKeyFileBytes = 4096;

// The file's text without trailing whitespace (newline, carriage return,
// space, tab); at most kMaxKeyFileBytes. Nothing else is checked.
Result<std::string> read_key_file(const std::string& path);

// An API key: read_key_file's text; an empty key, or one with whitespace or
// control characters inside, is refused.
Result<std::string> read_secret_file(const std::string& path);

}  // namespace prefixd
