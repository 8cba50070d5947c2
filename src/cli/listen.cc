#include "cli/listen.h"

#include <charconv>

namespace kvgov::cli {

Status ParseListen(const std::string& listen, std::string* host_out, uint16_t* port_out) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    return Status::InvalidArgument("--listen: want HOST:PORT, got '" + listen + "'");
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port_text = listen.substr(colon + 1);
  unsigned long port = 0;
  const char* end = port_text.data() + port_text.size();
  if (auto [stop, error] = std::from_chars(port_text.data(), end, port);
      error != std::errc() || stop != end) {
    return Status::InvalidArgument("--listen: port '" + port_text + "' is not a number");
  }
  if (port > 65535) {
    return Status::InvalidArgument("--listen: port " + port_text + " is out of range 0-65535");
  }
  *host_out = host;
  *port_out = static_cast<uint16_t>(port);
  return Status::Ok();
}

}  // namespace kvgov::cli
