// ClientOptions: parsing and writing the daemon's base URL.
#include "client/client_options.h"

#include <cstdlib>

namespace prefixd::client {
namespace {

// "::1" -> "[::1]"; names and IPv4 addresses unchanged.
std::string url_host(const std::string& host) {
  return host.find(':') == std::string::npos ? host : "[" + host + "]";
}

}  // namespace

Status ClientOptions::set_url(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return Status::error("daemon URL '" + url + "': " + why);
  };
  bool use_tls = false;
  std::string rest;
  if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    use_tls = true;
    rest = url.substr(8);
  } else {
    return bad("does not start with http:// or https://");
  }
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find_first_of("/?#@") != std::string::npos)
    return bad("give only scheme://HOST[:PORT], without a path, query or user");
  std::string new_host, port_text;
  bool has_port = false;
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) return bad("unclosed '[' around an IPv6 address");
    new_host = rest.substr(1, close - 1);
    const std::string after = rest.substr(close + 1);
    if (!after.empty() && after[0] != ':') return bad("unexpected text after ']'");
    has_port = !after.empty();
    if (has_port) port_text = after.substr(1);
  } else {
    const size_t colon = rest.find(':');
    new_host = rest.substr(0, colon);
    has_port = colon != std::string::npos;
    if (has_port) port_text = rest.substr(colon + 1);
  }
  if (new_host.empty()) return bad("no host");
  // cpp-httplib 0.11 reads an https URL's bracketed host as digits and colons only.
  if (use_tls && new_host.find(':') != std::string::npos &&
      new_host.find_first_not_of("0123456789:") != std::string::npos)
    return bad("https to an IPv6 address with letters is not supported; use a host name");
  int32_t new_port = use_tls ? 443 : 80;
  if (has_port) {
    if (port_text.empty() || port_text.size() > 5 ||
        port_text.find_first_not_of("0123456789") != std::string::npos)
      return bad("the port is not a number");
    new_port = static_cast<int32_t>(std::strtol(port_text.c_str(), nullptr, 10));
    if (new_port < 1 || new_port > 65535) return bad("the port is not in 1..65535");
  }
  host = std::move(new_host);
  port = new_port;
  tls = use_tls;
  return Status::ok_status();
}

std::string ClientOptions::url() const {
  return std::string(tls ? "https://" : "http://") + url_host(host) + ":" + std::to_string(port);
}

}  // namespace prefixd::client
