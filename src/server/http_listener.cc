#include "kvgov/server/http_listener.h"

#include <sys/socket.h>

#include <httplib.h>

#include <memory>

namespace kvgov::server {

Result<uint16_t> BindListener(httplib::Server& http, const std::string& host, uint16_t port) {
  // httplib hands the socket to this callback before it binds and listens;
  // it is kept to listen on it again, with the wider queue, after.
  auto bound_socket = std::make_shared<socket_t>(INVALID_SOCKET);
  http.set_socket_options([bound_socket](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    *bound_socket = sock;
  });
  const int bound =
      port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return Status::IOError("cannot listen on " + host + ":" + std::to_string(port) +
                           " (address in use or not available)");
  }
  // listen() on a listening socket only resizes its accept queue.
  if (::listen(*bound_socket, SOMAXCONN) != 0) {
    return Status::IOError("cannot widen the accept queue of " + host + ":" +
                           std::to_string(bound));
  }
  return static_cast<uint16_t>(bound);
}

}  // namespace kvgov::server
