#include "kvgov/core/json_string.h"

#include "kvgov/core/hex.h"

namespace kvgov {

void AppendJsonString(std::string& out, std::string_view text) {
  out.push_back('"');
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (byte < 0x20) {
          out += "\\u00";
          AppendHex(std::string_view(&c, 1), out);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

}  // namespace kvgov
