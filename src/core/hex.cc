#include "kvgov/core/hex.h"

namespace kvgov {
namespace {

constexpr char kDigits[] = "0123456789abcdef";

// The value of a hex digit, or -1.
int DigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void AppendHex(std::string_view bytes, std::string& out) {
  out.reserve(out.size() + bytes.size() * 2);
  for (const char c : bytes) {
    const auto byte = static_cast<unsigned char>(c);
    out.push_back(kDigits[byte >> 4]);
    out.push_back(kDigits[byte & 0xf]);
  }
}

std::string HexEncode(std::string_view bytes) {
  std::string out;
  AppendHex(bytes, out);
  return out;
}

Result<std::string> HexDecode(std::string_view hex, std::string_view what) {
  if (hex.size() % 2 != 0) {
    return Status::InvalidArgument(std::string(what) + ": an odd number of hex digits (" +
                                   std::to_string(hex.size()) + ")");
  }
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int high = DigitValue(hex[i]);
    const int low = DigitValue(hex[i + 1]);
    if (high < 0 || low < 0) {
      return Status::InvalidArgument(std::string(what) + ": not a hex digit at offset " +
                                     std::to_string(high < 0 ? i : i + 1));
    }
    out.push_back(static_cast<char>((high << 4) | low));
  }
  return out;
}

void WriteHex64(uint64_t value, std::string& out) {
  out.resize(16);
  for (int i = 15; i >= 0; --i) {
    out[static_cast<size_t>(i)] = kDigits[value & 0xf];
    value >>= 4;
  }
}

std::string Hex64(uint64_t value) {
  std::string out;
  WriteHex64(value, out);
  return out;
}

std::string HexNumber(uint64_t value) {
  std::string out = "0x";
  bool started = false;
  for (int shift = 60; shift >= 0; shift -= 4) {
    const unsigned digit = (value >> shift) & 0xf;
    if (digit != 0 || started || shift == 0) {
      out.push_back(kDigits[digit]);
      started = true;
    }
  }
  return out;
}

}  // namespace kvgov
