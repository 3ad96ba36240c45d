// The plain and HTTPS listeners and the certificate checks (see listener.h).
// The files are read with common/private_files.h; the pair check asks
// httplib::SSLServer whether OpenSSL loaded both, and the TLS floor is set
// with OpenSSL's SSL_CTX_set_min_proto_version on httplib's context.
#include "daemon/http/listener.h"

#include <httplib.h>

#include "common/private_files.h"
#include "daemon/http/connection_server.h"

namespace prefixd {
namespace {

constexpr size_t kMaxPemBytes = 1 << 20;  // a certificate chain or key is a few KiB

// The PEM file `path` of `flag`, read with `access`; refused unless it holds
// `marker` (`holds`: what it should hold and the line that shows it).
Result<std::string> read_pem(const std::string& flag, const std::string& path, FileAccess access,
                             const char* marker, const char* holds) {
  Result<std::string> text = read_private_file(path, kMaxPemBytes, flag, access);
  if (text.ok() && text->find(marker) == std::string::npos)
    return Status::error(flag + " " + path + " holds no PEM " + holds);
  return text;
}

}  // namespace

Status check_tls_files(const std::string& cert_path, const std::string& key_path) {
  Result<std::string> cert =
      read_pem("--tls-cert", cert_path, FileAccess::kPublic, "-----BEGIN CERTIFICATE-----",
               "certificate (no -----BEGIN CERTIFICATE----- line)");
  if (!cert.ok()) return cert.status();
  // Private: refused when others may read it, or when it is this user's file
  // and group or others have any access (as ssh treats its keys); a key
  // another owner shares with a group (0640 root:ssl-cert) is accepted.
  Result<std::string> key =
      read_pem("--tls-key", key_path, FileAccess::kOwnerOrGroupShared, "PRIVATE KEY-----",
               "private key (no -----BEGIN ... PRIVATE KEY----- line)");
  if (!key.ok()) return key.status();
  // OpenSSL would prompt on the terminal for the passphrase of an encrypted key.
  if (key->find("ENCRYPTED") != std::string::npos) {
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
