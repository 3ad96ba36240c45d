// Reading a secret (an API key) from a file that only its owner may read
// (read_private_file in common/private_files.h, FileAccess::kOwnerOnly):
// refused, naming the path and the problem, when the file is a symbolic link,
// not a regular file of this user, or open to group or others.
#pragma once

#include <string>

#include "common/result.h"

namespace prefixd {

// The file's text without trailing whitespace; an empty key, one with
// whitespace or control characters inside, or one over 4096 bytes is refused.
Result<std::string> read_secret_file(const std::string& path);


}  // namespace prefixd
