#pragma once

// Internal to kvgov_cli: --redis-password-file, which kvgov serve and
// kvgov token take alike.

#include <string>

#include "kvgov/core/status.h"

namespace kvgov::cli {

inline constexpr const char* kRedisPasswordFileHelp =
    "A file holding the password of --redis (trailing whitespace ignored; mode\n"
    "0600, or 0640 owned by root), so it stays out of the process's arguments\n"
    "and --print-config; --redis then names none itself.";

/// `redis_url` with the password `password_file` holds. InvalidArgument
/// without a URL, when the URL has a password too, or for a bad file;
/// IOError when the file cannot be read.
Result<std::string> WithRedisPasswordFile(const std::string& redis_url,
                                          const std::string& password_file);

}  // namespace kvgov::cli
