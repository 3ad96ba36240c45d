// The daemon's HTTP listener: a plain httplib::Server, or an httplib::SSLServer
// (HTTPS, OpenSSL) when --tls-cert and --tls-key are given; and the start-up
// checks of those two files, so that a bad pair is refused, naming the file,
// before the model is loaded.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"

namespace httplib {
class Server;
}

namespace prefixd {

struct ConnectionOptions;  // daemon/http/connection_server.h

// Checks a certificate and private key pair for the HTTPS listener:
// - both files open and hold PEM (a certificate chain; an unencrypted key);
// - the key is private and no symbolic link (read with O_NOFOLLOW,
//   common/private_files.h): refused when others may read it, or when it is this
//   user's file and group or others have any access (as ssh treats its keys);
//   a root-owned key shared with a group (0640 root:ssl-cert) is accepted;
// - OpenSSL accepts the pair (the key is the certificate's).
// Errors name the file and the flag.
Status check_tls_files(const std::string& cert_path, const std::string& key_path);

// The listener: HttpsServer (httplib::SSLServer) loaded from the two files
// when both are set, else a plain HttpServer; both serve their connections
// within `connections` (daemon/http/connection_server.h). Routes and body limits
// are the caller's to set. TLS 1.2 or newer (set on the SSL context,
// so a system-wide OpenSSL security level 0 does not re-enable 1.0 or 1.1).
Result<std::unique_ptr<httplib::Server>> make_http_server(const std::string& tls_cert_path,
                                                          const std::string& tls_key_path,
                                                          const ConnectionOptions& connections);

}  // namespace prefixd
