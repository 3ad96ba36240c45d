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

}  // namespace prefixd
