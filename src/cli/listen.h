#pragma once

// Internal to kvgov_cli.

#include <cstdint>
#include <string>

#include "kvgov/core/status.h"

namespace kvgov::cli {

/// "127.0.0.1:8787" or "[::1]:0" -> host and port. InvalidArgument naming
/// --listen and what is wrong.
Status ParseListen(const std::string& listen, std::string* host, uint16_t* port);

}  // namespace kvgov::cli
