#pragma once

// The gateway's route table: a method and an exact path to a handler.
// Internal to kvgov (see front_door.h).

#include <utility>  // before Asio: see front_door.h

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "gateway/front_door.h"

namespace kvgov::gateway {

/// Filled once, then turned into the front door's handler. Paths match
/// exactly, the query ignored. tests/openapi_coverage.py reads the
/// registrations (`http.Get(PATH, ...)`, as cpp-httplib's) against the
/// OpenAPI document.
///
/// Thread-compatible while filled; the handler it makes is thread-safe.
class Routes {
 public:
  void Get(std::string path, Handler handler);
  void Post(std::string path, Handler handler);

  /// The front door's handler: each request to its route's handler, the
  /// rest to `no_route`.
  Handler Dispatch(Handler no_route) &&;

 private:
  // By method, then path.
  std::map<std::pair<boost::beast::http::verb, std::string>, Handler, std::less<>> routes_;
};

/// The path of a request target, without its query.
std::string_view PathOf(const Request& request);

}  // namespace kvgov::gateway
