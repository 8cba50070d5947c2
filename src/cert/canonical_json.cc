#include "cert/canonical_json.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "kvgov/core/json_string.h"
#include "kvgov/core/utf8.h"

namespace kvgov::cert_internal {
namespace {

Status Canonicalize(const Json& value, const std::string& path, std::string& out) {
  switch (value.type()) {
    case Json::value_t::object: {
      std::vector<std::pair<std::string_view, const Json*>> members;
      members.reserve(value.size());
      for (auto it = value.begin(); it != value.end(); ++it) {
        const std::string& key = it.key();
        for (const char c : key) {
          if (static_cast<unsigned char>(c) >= 0x80) {
            return PathError(ChildPath(path, key),
                             "key is not ASCII (canonical keys must sort by byte order)");
          }
        }
        members.emplace_back(key, &it.value());
      }
      // For ASCII keys, UTF-16 code-unit order (RFC 8785 section 3.2.3) is
      // byte order.
      std::sort(members.begin(), members.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      out.push_back('{');
      for (size_t i = 0; i < members.size(); ++i) {
        if (i > 0) out.push_back(',');
        KVGOV_RETURN_IF_ERROR(AppendCanonicalString(members[i].first, out));
        out.push_back(':');
        KVGOV_RETURN_IF_ERROR(
            Canonicalize(*members[i].second, ChildPath(path, members[i].first), out));
      }
      out.push_back('}');
      return Status::Ok();
    }
    case Json::value_t::array:
      out.push_back('[');
      for (size_t i = 0; i < value.size(); ++i) {
        if (i > 0) out.push_back(',');
        KVGOV_RETURN_IF_ERROR(Canonicalize(value[i], IndexPath(path, i), out));
      }
      out.push_back(']');
      return Status::Ok();
    case Json::value_t::string: {
      Status status = AppendCanonicalString(value.get_ref<const std::string&>(), out);
      return status.ok() ? status : PathError(path, status.message());
    }
    case Json::value_t::boolean:
      out += value.get<bool>() ? "true" : "false";
      return Status::Ok();
    case Json::value_t::number_unsigned: {
      const auto number = value.get<uint64_t>();
      if (number > kMaxSafeInteger) {
        return PathError(path, "integer " + std::to_string(number) + " is over 2^53-1");
      }
      out += std::to_string(number);
      return Status::Ok();
    }
    case Json::value_t::number_integer: {
      const auto number = value.get<int64_t>();
      // Compare magnitudes without negating INT64_MIN.
      const uint64_t magnitude =
          number < 0 ? uint64_t{0} - static_cast<uint64_t>(number) : static_cast<uint64_t>(number);
      if (magnitude > kMaxSafeInteger) {
        return PathError(path, "integer " + std::to_string(number) + " is outside +-(2^53-1)");
      }
      out += std::to_string(number);
      return Status::Ok();
    }
    case Json::value_t::number_float:
      return PathError(path, "floats have no canonical form here; want an integer");
    case Json::value_t::null:
      return PathError(path, "null is not part of the signed value space");
    case Json::value_t::binary:
    case Json::value_t::discarded:
      break;
  }
  return PathError(path, "value has no JSON form");
}

}  // namespace

Status AppendCanonicalString(std::string_view text, std::string& out) {
  // RFC 8785 escapes only what JSON requires; everything else, UTF-8
  // included, is copied. So the one check left here is that it is UTF-8.
  for (size_t at = 0; at < text.size();) {
    if (static_cast<unsigned char>(text[at]) < 0x80) {
      ++at;
      continue;
    }
    const size_t length = Utf8SequenceLength(text, at);
    if (length == 0) return Status::InvalidArgument("invalid UTF-8 at byte " + std::to_string(at));
    at += length;
  }
  AppendJsonString(out, text);
  return Status::Ok();
}

Result<std::string> CanonicalJson(const Json& value) {
  std::string out;
  KVGOV_RETURN_IF_ERROR(Canonicalize(value, "$", out));
  return out;
}

}  // namespace kvgov::cert_internal
