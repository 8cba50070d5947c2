#include "connectors/control_url.h"

#include <charconv>
#include <system_error>

namespace kvgov::connectors {

Result<ControlEndpoint> ParseControlUrl(std::string_view url) {
  const std::string got = ", got '" + std::string(url) + "'";
  if (url.starts_with("https://")) {
    return Status::InvalidArgument("control: https is not supported yet; use http://HOST:PORT" +
                                   got);
  }
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) {
    return Status::InvalidArgument("control: want http://HOST:PORT" + got);
  }
  std::string_view rest = url.substr(kScheme.size());
  if (rest.ends_with('/')) rest.remove_suffix(1);
  if (rest.find_first_of("/?#@ ") != std::string_view::npos) {
    return Status::InvalidArgument("control: want http://HOST:PORT with no user, path or query" +
                                   got);
  }
  ControlEndpoint endpoint;
  std::string_view port_text;
  if (rest.starts_with('[')) {  // [::1]:8000
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) {
      return Status::InvalidArgument("control: IPv6 host has no closing ']'" + got);
    }
    endpoint.host = std::string(rest.substr(1, close - 1));
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (!after.starts_with(':')) {
        return Status::InvalidArgument("control: want ':PORT' after ']'" + got);
      }
      port_text = after.substr(1);
      if (port_text.empty()) return Status::InvalidArgument("control: empty port" + got);
    }
  } else {
    const size_t colon = rest.rfind(':');
    endpoint.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = rest.substr(colon + 1);
      if (port_text.empty()) return Status::InvalidArgument("control: empty port" + got);
    }
    if (endpoint.host.find(':') != std::string::npos) {
      return Status::InvalidArgument("control: put an IPv6 host in brackets, [::1]:8000" + got);
    }
  }
  if (endpoint.host.empty()) return Status::InvalidArgument("control: empty host" + got);
  if (!port_text.empty()) {
    int port = 0;
    auto [end, error] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (error != std::errc() || end != port_text.data() + port_text.size() || port <= 0 ||
        port > 65535) {
      return Status::InvalidArgument("control: port '" + std::string(port_text) +
                                     "' is not in 1-65535");
    }
    endpoint.port = port;
  }
  return endpoint;
}

std::string RequestErrorText(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "cannot connect";
    case httplib::Error::ConnectionTimeout:
      return "connect timed out";
    case httplib::Error::Read:
      return "read failed or timed out";
    case httplib::Error::Write:
      return "write failed";
    case httplib::Error::Canceled:
      return "canceled";
    default:
      return "request failed (" + httplib::to_string(error) + ")";
  }
}

}  // namespace kvgov::connectors
