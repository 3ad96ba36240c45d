// ClientOptions: where and how the C++ client reaches the daemon (host, port, TLS, API key,
// timeouts), and the base URL they are set from and written as.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace prefixd::client {

// Where and how to reach the daemon. Times are in seconds.
struct ClientOptions {
  std::string host = "127.0.0.1";
  int32_t port = 8080;
  // https: TLS, verifying the daemon's certificate chain and that it names `host` (unless
  // insecure).
  bool tls = false;
  std::string ca_cert_path;  // https: PEM file of the CAs to trust; empty = the system's CAs
  bool insecure = false;     // https: skip certificate verification (anyone on the path can read
                             // and change the traffic, the API key included); off by default
  std::string api_key;  // sent as "Authorization: Bearer KEY" when not empty
  double connect_timeout_s = 5.0;
  double read_timeout_s = 600.0;  // longest silence allowed between bytes of a response
  double write_timeout_s = 60.0;
  bool keep_alive = true;  // reuse one TCP connection across calls
  bool tcp_nodelay = true;  // no Nagle: request writes never wait for a delayed ACK
  // Completions, chat and the cache queries (lookup, prefetch, pin, unpin) send
  // "X-Prefix-Key: prefix_key(...)", so a load balancer in front of
  // several replicas (ops/haproxy/haproxy.cfg) sends requests sharing a prompt's leading part to
  // the same replica. The key is a hash: the prompt itself is never sent in a header.
  bool prefix_key_header = true;

  // Sets host, port and tls from a base URL: "http://HOST[:PORT]" or "https://HOST[:PORT]"
  // (default ports 80 and 443; HOST may be a bracketed IPv6 address; a trailing "/" is allowed,
  // any other path, a query or user info is not). Leaves the options unchanged on error.
  Status set_url(const std::string& url);
  // The base URL: "http://127.0.0.1:8080", "https://[::1]:8443".
  std::string url() const;
};

}  // namespace prefixd::client
