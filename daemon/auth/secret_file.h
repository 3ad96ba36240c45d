// Reading a secret (an API key) from a file that only its owner may read:
// refused, naming the path and the problem, when the file is not a regular
// file of this user or is open to group or others (as ssh treats its keys).
#pragma once

#include <string>

#include "common/result.h"

namespace prefixd {

// The file's text without trailing whitespace; an empty key, one with
// whitespace or control characters inside, or one over 4096 bytes is refused.
Result<std::string> read_secret_file(const std::string& path);

// The whole text of a private file (the same checks as read_secret_file) of
// at most `max_bytes` bytes, as it is: the API key file of --api-keys.
Result<std::string> read_private_file(const std::string& path, size_t max_bytes);

}  // namespace prefixd
