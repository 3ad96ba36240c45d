// Private files: directories only their owner may enter or change (0700) and
// files only it may read (0600), for what prefixd keeps on disk (generated
// models, fingerprints, the disk tier), temporary files that a planted file
// or symbolic link cannot redirect, and the one reader of the secrets it is
// given (API keys, the key list, the TLS key, the cache secret). POSIX; every function may be called
// from any thread.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "common/result.h"

namespace prefixd {

namespace private_files_detail {

inline std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

inline std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace private_files_detail

// Checks that `path` is a directory only this process's user may change:
// owned by the effective uid and writable by neither group nor others (what
// ssh's StrictModes asks of ~/.ssh; the sticky bit does not help, a sticky
// /tmp is refused). A symbolic link is followed and its target checked. The
// error names the path, the problem and the command that fixes it.
inline Status check_private_dir(const std::string& path) {
  using private_files_detail::octal_mode;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status::error("cannot use directory '" + path + "': " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) return Status::error("'" + path + "' is not a directory");
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    return Status::error("directory '" + path + "' is owned by uid " + std::to_string(st.st_uid) +
                         ", not by this user (uid " + std::to_string(me) +
                         "): its owner could change what prefixd reads from it; use a "
                         "directory of your own, or run `chown " +
                         std::to_string(me) + " '" + path + "'`");
  }
  const bool by_group = (st.st_mode & S_IWGRP) != 0, by_others = (st.st_mode & S_IWOTH) != 0;
  if (by_group || by_others) {
    const char* who = by_group && by_others ? "group and others"
                      : by_group            ? "its group"
                                            : "others";
    return Status::error("directory '" + path + "' is writable by " + who + " (mode " +
                         octal_mode(st.st_mode) +
                         "), who could plant or replace files in it: run `chmod 700 '" + path +
                         "'`, or use another directory");
  }
  return Status::ok_status();
}

// Creates `path` and its missing parents with mode 0700, then checks `path`
// with check_private_dir. An existing `path` of this user's that its group or
// others may read or enter is narrowed to 0700, so that files earlier runs
// left under it with looser modes become private too.
inline Status make_private_dir(const std::string& path) {
  if (path.empty()) return Status::error("empty directory path");
  for (size_t end = 1; end <= path.size(); ++end) {
    if (end < path.size() && path[end] != '/') continue;
    if (path[end - 1] == '/') continue;  // "a//b" or a trailing slash
    const std::string part = path.substr(0, end);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::error("cannot create directory '" + part + "': " + std::strerror(errno));
    }
  }
  if (Status s = check_private_dir(path); !s.ok()) return s;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status::error("cannot use directory '" + path + "': " + std::strerror(errno));
  }
  if ((st.st_mode & 077) != 0 && ::chmod(path.c_str(), st.st_mode & 07700) != 0) {
    return Status::error("cannot make directory '" + path +
                         "' private (chmod 700): " + std::strerror(errno));
  }
  return Status::ok_status();
}

// A file written under a random name next to its target, then moved over the
// target by commit(). The temporary file is made by mkstemp (O_CREAT|O_EXCL:
// a file or symbolic link planted at its name is never opened; mode 0600);
// commit() fsyncs, closes and renames it, and rename replaces a symbolic link
// at the target's name instead of following it. Destroyed without a
// successful commit(), the temporary file is removed. Move-only; one thread
// at a time.
class PrivateTempFile {
 public:
  static Result<PrivateTempFile> create(const std::string& target_path) {
    if (target_path.empty() || target_path.back() == '/') {
      return Status::error("'" + target_path + "' is not a file path");
    }
    std::string tmpl = target_path + ".tmp.XXXXXX";
    const int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd < 0) {
      return Status::error("cannot create a temporary file for '" + target_path +
                           "': " + std::strerror(errno));
    }
    return PrivateTempFile(target_path, std::move(tmpl), fd);
  }

  PrivateTempFile(PrivateTempFile&& o) noexcept
      : target_(std::move(o.target_)), tmp_path_(std::move(o.tmp_path_)), fd_(o.fd_) {
    o.fd_ = -1;
    o.tmp_path_.clear();
  }
  PrivateTempFile& operator=(PrivateTempFile&&) = delete;
  PrivateTempFile(const PrivateTempFile&) = delete;
  PrivateTempFile& operator=(const PrivateTempFile&) = delete;
  ~PrivateTempFile() { discard(); }

  int fd() const { return fd_; }                         // -1 after commit()
  const std::string& path() const { return tmp_path_; }  // the temporary file's name

  // Appends `n_bytes` bytes (retrying short writes and EINTR).
  Status write(const void* data, size_t n_bytes) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (n_bytes > 0) {
      const ssize_t w = ::write(fd_, p, n_bytes);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::error("cannot write '" + tmp_path_ + "': " + std::strerror(errno));
      }
      p += w;
      n_bytes -= static_cast<size_t>(w);
    }
    return Status::ok_status();
  }

  // fsync, close, rename over the target, then fsync the directory (best
  // effort) so the rename survives a crash. On failure the temporary file is
  // removed and the target left as it was.
  Status commit() {
    if (fd_ < 0) return Status::error("'" + target_ + "': temporary file already committed");
    if (::fsync(fd_) != 0) return fail(errno, "cannot sync");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return fail(errno, "cannot close");
    if (::rename(tmp_path_.c_str(), target_.c_str()) != 0) return fail(errno, "cannot rename");
    tmp_path_.clear();
    const std::string dir = private_files_detail::parent_dir(target_);
    if (int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
    return Status::ok_status();
  }

 private:
  PrivateTempFile(std::string target, std::string tmp_path, int fd)
      : target_(std::move(target)), tmp_path_(std::move(tmp_path)), fd_(fd) {}

  // `err`: the failed call's errno; `what`: "cannot sync", "cannot rename", ...
  Status fail(int err, const char* what) {
    Status s = Status::error(std::string(what) + " '" + tmp_path_ + "' (for '" + target_ +
                             "'): " + std::strerror(err));
    discard();
    return s;
  }
  void discard() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());
    tmp_path_.clear();
  }

  std::string target_;    // the file commit() replaces
  std::string tmp_path_;  // empty once renamed or removed
  int fd_ = -1;
};

// Writes `n_bytes` bytes to `path` through a PrivateTempFile: the file ends
// up complete or not at all, with mode 0600.
inline Status write_file_atomically(const std::string& path, const void* data, size_t n_bytes) {
  Result<PrivateTempFile> tmp = PrivateTempFile::create(path);
  if (!tmp.ok()) return tmp.status();
  if (Status s = tmp->write(data, n_bytes); !s.ok()) return s;
  return tmp->commit();
}

// Who besides its owner may read a file read with read_private_file.
enum class FileAccess : uint8_t {
  // Anyone (a TLS certificate): no owner or mode check, and a symbolic link is
  // followed (certbot publishes certificates as links).
  kPublic,
  // This user's own file with no access for group or others (0600, 0400), as
  // ssh treats its keys: API keys, the key list, the cache secret.
  kOwnerOnly,
  // No access for others; when it is this user's file, none for its group
  // either. A key another owner shares with a group is accepted (0640
  // root:ssl-cert): the TLS key.
  kOwnerOrGroupShared,
};

// Reads the whole of the regular file `path`, at most `max_bytes` bytes,
// opened with O_NOFOLLOW unless kPublic (a symbolic link at `path` is
// refused, not followed: point the flag at the file itself) and checked on
// the open descriptor (fstat) against `access`. Every error
// begins with `what` and the path (e.g. "the key file /x", "--tls-key /x"),
// says what is wrong and, for a mode, the chmod that fixes it.
inline Result<std::string> read_private_file(const std::string& path, size_t max_bytes,
                                             const std::string& what, FileAccess access) {
  using private_files_detail::octal_mode;
  const std::string name = what + " " + path;
  const int no_follow = access == FileAccess::kPublic ? 0 : O_NOFOLLOW;
  const int fd = ::open(path.c_str(), O_RDONLY | no_follow | O_CLOEXEC);
  if (fd < 0 && errno == ELOOP && no_follow != 0) {
    return Status::error(name + " is a symbolic link, which is refused for a private file: "
                                "name the file it points to");
  }
  if (fd < 0) return Status::error(name + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  auto refuse = [&](std::string message) {
    ::close(fd);
    return Status::error(name + message);
  };
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return refuse(" is not a regular file");
  const bool own_file = st.st_uid == ::geteuid();
  if (access == FileAccess::kOwnerOnly && !own_file) {
    return refuse(" belongs to another user (uid " + std::to_string(st.st_uid) +
                  "); it must be this user's own file");
  }
  const bool open_to_others =
      (access == FileAccess::kOwnerOnly && (st.st_mode & 077) != 0) ||
      (access == FileAccess::kOwnerOrGroupShared &&
       ((st.st_mode & S_IROTH) != 0 || (own_file && (st.st_mode & 077) != 0)));
  if (open_to_others) {
    return refuse(std::string(" is open to ") + (own_file ? "group or others" : "others") +
                  " (mode " + octal_mode(st.st_mode) + "); run chmod 600 " + path);
  }
  std::string text(max_bytes + 1, '\0');
  size_t got = 0;
  for (;;) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return refuse(std::string(": cannot read: ") + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
    if (got == text.size()) break;
  }
  ::close(fd);
  if (got > max_bytes) {
    return Status::error(name + " holds more than " + std::to_string(max_bytes) + " bytes");
  }
  text.resize(got);
  return text;
}

}  // namespace prefixd
