// Deployment secret: a private file's content, hashed with a domain label.
#include "daemon/deployment_secret.h"

#include <openssl/evp.h>

#include <cstring>

#include "daemon/auth/secret_file.h"

namespace prefixd {

Result<std::array<uint8_t, 16>> read_deployment_secret(const std::string& path) {
  constexpr size_t kMinBytes = 16;
  Result<std::string> read = read_key_file(path);
  if (!read.ok()) return Status::error("--cache-secret-file: " + read.message());
  const std::string content = std::move(read).value();
  if (content.size() < kMinBytes) {
    return Status::error("--cache-secret-file '" + path + "': holds " + std::to_string(content.size()) +
                         " bytes, at least " + std::to_string(kMinBytes) +
                         " are needed (make one with: head -c 32 /dev/urandom | base64 > FILE; "
                         "chmod 600 FILE)");
  }
  // A label keeps this derivation apart from any other use of the same file.
  const std::string labelled = std::string("prefixd deployment secret v1") + '\0' + content;
  std::array<uint8_t, 32> digest{};
  unsigned int n = 0;
  if (EVP_Digest(labelled.data(), labelled.size(), digest.data(), &n, EVP_sha256(), nullptr) != 1 ||
      n != digest.size()) {
    return Status::error("--cache-secret-file: SHA-256 failed");
  }
  std::array<uint8_t, 16> secret{};
  std::memcpy(secret.data(), digest.data(), secret.size());
  return secret;
}

}  // namespace prefixd
