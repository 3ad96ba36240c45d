// HTTPS listener and its certificate checks (see listener.h). Only
// cpp-httplib's API is used (OpenSSL itself is not linked into the daemon), so
// the pair check asks httplib::SSLServer whether OpenSSL loaded both files.
#include "daemon/http/listener.h"

#include <fcntl.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "daemon/http/connection_server.h"

namespace prefixd {
namespace {

constexpr size_t kMaxPemBytes = 1 << 20;  // a certificate chain or key is a few KiB

struct PemFile {
  std::string text;
  struct stat st {};
};

// The file's bytes (at most kMaxPemBytes) and its stat; `flag` names it in errors.
Result<PemFile> read_pem_file(const std::string& flag, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(flag + " " + path + ": cannot open: " + std::strerror(errno));
  PemFile f;
  if (::fstat(fd, &f.st) != 0 || !S_ISREG(f.st.st_mode)) {
    ::close(fd);
    return Status::error(flag + " " + path + " is not a regular file");
  }
  f.text.resize(kMaxPemBytes + 1);
  size_t got = 0;
  for (;;) {
    const ssize_t n = ::read(fd, f.text.data() + got, f.text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Status::error(flag + " " + path + ": cannot read: " + std::strerror(err));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
    if (got == f.text.size()) break;
  }
  ::close(fd);
  if (got > kMaxPemBytes) return Status::error(flag + " " + path + " is larger than 1 MiB");
  f.text.resize(got);
  return f;
}

std::string mode_string(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

Status check_tls_files(const std::string& cert_path, const std::string& key_path) {
  Result<PemFile> cert = read_pem_file("--tls-cert", cert_path);
  if (!cert.ok()) return cert.status();
  if (cert->text.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return Status::error("--tls-cert " + cert_path +
                         " holds no PEM certificate (no -----BEGIN CERTIFICATE----- line)");
  }
  Result<PemFile> key = read_pem_file("--tls-key", key_path);
  if (!key.ok()) return key.status();
  const mode_t mode = key->st.st_mode;
  const bool own_file = key->st.st_uid == ::geteuid();
  if ((mode & S_IROTH) != 0 || (own_file && (mode & 077) != 0)) {
    return Status::error("--tls-key " + key_path + " is open to " +
                         (own_file ? "group or others" : "others") + " (mode " + mode_string(mode) +
                         "); a private key must be private: run chmod 600 " + key_path);
  }
  if (key->text.find("PRIVATE KEY-----") == std::string::npos) {
    return Status::error("--tls-key " + key_path +
                         " holds no PEM private key (no -----BEGIN ... PRIVATE KEY----- line)");
  }
  // OpenSSL would prompt on the terminal for the passphrase of an encrypted key.
  if (key->text.find("ENCRYPTED") != std::string::npos) {
    return Status::error("--tls-key " + key_path +
                         " is encrypted and prefixd cannot ask for its passphrase; decrypt it "
                         "(openssl pkey -in KEY -out PLAIN_KEY) into a 0600 file");
  }
  httplib::SSLServer probe(cert_path.c_str(), key_path.c_str());
  if (!probe.is_valid()) {
    return Status::error("--tls-key " + key_path + " is not the private key of --tls-cert " +
                         cert_path + " (OpenSSL refused the pair: the key does not match the "
                         "certificate, or one of the two files is not valid PEM)");
  }
  return Status::ok_status();
}

Result<std::unique_ptr<httplib::Server>> make_http_server(const std::string& tls_cert_path,
                                                          const std::string& tls_key_path,
                                                          const ConnectionOptions& connections) {
  if (tls_cert_path.empty() && tls_key_path.empty())
    return std::unique_ptr<httplib::Server>(std::make_unique<HttpServer>(connections));
  if (tls_cert_path.empty() || tls_key_path.empty())
    return Status::error("--tls-cert and --tls-key go together: give both or neither");
  auto server =
      std::make_unique<HttpsServer>(tls_cert_path.c_str(), tls_key_path.c_str(), connections);
  if (!server->is_valid()) {
    return Status::error("cannot start HTTPS with --tls-cert " + tls_cert_path + " and --tls-key " +
                         tls_key_path + ": OpenSSL refused the pair");
  }
  // TLS 1.2 or newer whatever the system's OpenSSL security level says.
  if (SSL_CTX_set_min_proto_version(server->ssl_context(), TLS1_2_VERSION) != 1) {
    return Status::error("cannot start HTTPS: OpenSSL refused a minimum of TLS 1.2");
  }
  return std::unique_ptr<httplib::Server>(std::move(server));
}

}  // namespace prefixd
