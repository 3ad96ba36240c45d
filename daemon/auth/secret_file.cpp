// Secret files (see secret_file.h).
#include "daemon/auth/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace prefixd {

Result<std::string> read_private_file(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::error("cannot open the key file " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error("the key file " + path + " is not a regular file");
  }
  if (st.st_uid != ::geteuid()) {
    ::close(fd);
    return Status::error("the key file " + path + " belongs to another user (uid " + std::to_string(st.st_uid) +
                         "); it must be this user's own file");
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::error("the key file " + path + " is open to group or others (mode " + mode + "); run chmod 600 " +
                         path);
  }
  std::string text(max_bytes + 1, '\0');
  size_t got = 0;
  for (;;) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
    if (got == text.size()) break;
  }
  ::close(fd);
  if (got > max_bytes)
    return Status::error("the key file " + path + " holds more than " + std::to_string(max_bytes) + " bytes");
  text.resize(got);
  return text;
}

Result<std::string> read_secret_file(const std::string& path) {
  Result<std::string> read = read_private_file(path, 4096);
  if (!read.ok()) return read;
  std::string text = std::move(read.value());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' || text.back() == '\t'))
    text.pop_back();
  if (text.empty()) return Status::error("the key file " + path + " is empty");
  for (unsigned char c : text) {
    if (c <= ' ' || c == 0x7f)
      return Status::error("the key file " + path + " holds whitespace or control characters inside the key");
  }
  return text;
}

}  // namespace prefixd
