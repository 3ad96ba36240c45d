// Host allow-list and Origin checks (see request_origin.h).
#include "daemon/http/request_origin.h"

#include <algorithm>
#include <cctype>

namespace prefixd {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// A bare IPv6 address as the bind address ("::1") is written in brackets in Host.
std::string bracketed(const std::string& host) {
  if (host.find(':') != std::string::npos && host.front() != '[') return "[" + host + "]";
  return host;
}

}  // namespace

OriginPolicy make_origin_policy(const std::string& bind_host, const std::vector<std::string>& extra_hosts,
                                const std::vector<std::string>& extra_origins) {
  OriginPolicy p;
  p.hosts = {"localhost", "127.0.0.1", "[::1]"};
  const std::string bind = lower(bind_host);
  if (!bind.empty() && bind != "0.0.0.0" && bind != "::" && bind != "[::]" && !contains(p.hosts, bracketed(bind)))
    p.hosts.push_back(bracketed(bind));
  for (const std::string& h : extra_hosts) {
    if (h == "*") {
      p.any_host = true;
    } else if (!h.empty()) {
      p.hosts.push_back(bracketed(host_without_port(h)));
    }
  }
  for (const std::string& o : extra_origins) {
    if (o == "*") {
      p.any_origin = true;
    } else if (!o.empty()) {
      std::string v = lower(o);
      while (!v.empty() && v.back() == '/') v.pop_back();
      p.origins.push_back(v);
    }
  }
  return p;
}

std::string host_without_port(std::string_view host_header) {
  std::string h = lower(host_header);
  if (!h.empty() && h.front() == '[') {
    const size_t close = h.find(']');
    return close == std::string::npos ? h : h.substr(0, close + 1);
  }
  const size_t colon = h.find(':');
  // More than one colon without brackets: an IPv6 address as it is.
  if (colon != std::string::npos && h.find(':', colon + 1) == std::string::npos) return h.substr(0, colon);
  return h;
}

std::optional<std::string> check_host(const OriginPolicy& policy, std::string_view host_header) {
  if (policy.any_host || host_header.empty()) return std::nullopt;
  const std::string host = host_without_port(host_header);
  if (contains(policy.hosts, host)) return std::nullopt;
  return "Host '" + std::string(host_header) +
         "' is not served here (DNS-rebinding defence); start prefixd with --allowed-hosts " + host +
         " to serve it";
}

std::optional<std::string> check_origin(const OriginPolicy& policy, std::string_view origin_header,
                                        std::string_view host_header) {
  if (policy.any_origin || origin_header.empty()) return std::nullopt;
  const std::string origin = lower(origin_header);
  if (contains(policy.origins, origin)) return std::nullopt;
  // The daemon's own pages (the dashboard): the Origin's authority is the Host.
  const size_t sep = origin.find("://");
  if (sep != std::string::npos && !host_header.empty() && origin.substr(sep + 3) == lower(host_header))
    return std::nullopt;
  return "Origin '" + std::string(origin_header) +
         "' may not call this API (cross-site defence); start prefixd with --allowed-origins " +
         std::string(origin_header) + " to allow it";
}

}  // namespace prefixd
