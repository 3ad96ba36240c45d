// Key files (see secret_file.h).
#include "daemon/auth/secret_file.h"

#include "common/private_files.h"

namespace prefixd {

Result<std::string> read_key_file(const std::string& path) {
  Result<std::string> read =
      read_private_file(path, kMaxKeyFileBytes, "the key file", FileAccess::kOwnerOnly);
  if (!read.ok()) return read;
  std::string text = std::move(read.value());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' ||
                           text.back() == '\t'))
    text.pop_back();
  return text;
}

Result<std::string> read_secret_file(const std::string& path) {
  Result<std::string> read = read_key_file(path);
  if (!read.ok()) return read;
  const std::string& text = read.value();
  if (text.empty()) return Status::error("the key file " + path + " is empty");
  for (unsigned char c : text) {
    if (c <= ' ' || c == 0x7f)
      return Status::error("the key file " + path +
                           " holds whitespace or control characters inside the key");
  }
  return read;
}

}  // namespace prefixd
