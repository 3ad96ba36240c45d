// The deployment secret from --cache-secret-file: the hash seed and MAC key
// that replicas sharing a remote tier (and a disk directory) must agree on.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/result.h"

namespace prefixd {

// Reads FILE as a key file (daemon/auth/secret_file.h: a private file of this
// user, at most 4096 bytes, trailing whitespace ignored; here at least 16
// bytes of content)
// and derives the 16-byte secret from it with SHA-256, so any text or binary
// content of enough entropy works (e.g. `head -c 32 /dev/urandom | base64`).
Result<std::array<uint8_t, 16>> read_deployment_secret(const std::string& path);

}  // namespace prefixd
