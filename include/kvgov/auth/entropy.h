#pragma once

#include <span>
#include <string>

#include "kvgov/core/status.h"

namespace kvgov::auth {

/// Fills `out` from the kernel's random source (getrandom). IOError if the
/// kernel refuses.
Status FillRandom(std::span<char> out);

/// 128 random bits as 32 lowercase hex digits, for ids a client must not be
/// able to guess (route decisions).
Result<std::string> RandomHexId();

}  // namespace kvgov::auth
