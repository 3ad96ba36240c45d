// The DNS-rebinding and cross-site defences, checked before routing: which
// `Host` a request may name (--allowed-hosts) and which `Origin` may send it
// (--allowed-origins; a page of the daemon's own origin always may).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace prefixd {

struct OriginPolicy {
  bool any_host = false;             // --allowed-hosts '*'
  std::vector<std::string> hosts;    // lower-case names/addresses, no port; IPv6 in brackets
  bool any_origin = false;           // --allowed-origins '*'
  std::vector<std::string> origins;  // lower-case "scheme://host[:port]"
};

// The default hosts (the bind address unless it is a wildcard, localhost,
// 127.0.0.1, [::1]) plus `extra_hosts`; `extra_origins` as given. A '*' in a
// list allows any.
OriginPolicy make_origin_policy(const std::string& bind_host, const std::vector<std::string>& extra_hosts,
                                const std::vector<std::string>& extra_origins);

// "Example.COM:8080" -> "example.com", "[::1]:80" -> "[::1]".
std::string host_without_port(std::string_view host_header);

// nullopt when a request with this Host header (empty: none sent) may be
// served, else the refusal's message.
std::optional<std::string> check_host(const OriginPolicy& policy, std::string_view host_header);

// nullopt when a request with this Origin header (empty: none sent) and Host
// header may be served: no Origin, the request's own origin, or an allowed one.
std::optional<std::string> check_origin(const OriginPolicy& policy, std::string_view origin_header,
                                        std::string_view host_header);

}  // namespace prefixd
