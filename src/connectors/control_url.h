#pragma once

#include <string>
#include <string_view>

#include <httplib.h>

#include "kvgov/core/status.h"

namespace kvgov::connectors {

/// Where an engine's (or controller's) HTTP control API listens.
struct ControlEndpoint {
  std::string host;  // without the brackets of an IPv6 literal
  int port = 80;
};

/// Parses a control URL of the form http://HOST[:PORT][/]: a DNS name, an
/// IPv4 literal or a bracketed IPv6 literal, an optional port in 1-65535
/// (80 when absent), an optional trailing slash. No user info, path, query
/// or fragment: callers append their own routes. https is refused (not
/// supported yet). Returns InvalidArgument naming what is wrong, prefixed
/// "control: ".
/// Used by the health prober and the invalidation connectors.
Result<ControlEndpoint> ParseControlUrl(std::string_view url);

/// A short, stable text for an httplib client error ("cannot connect",
/// "read failed or timed out", ...), for attempt records and logs.
std::string RequestErrorText(httplib::Error error);

}  // namespace kvgov::connectors
