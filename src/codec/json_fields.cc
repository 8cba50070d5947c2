#include "codec/json_fields.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

namespace kvgov::codec_internal {
namespace {

Status TypeError(const std::string& path, std::string_view want, const Json& got) {
  std::string problem = "want ";
  problem += want;
  problem += ", got ";
  problem += got.type_name();
  return PathError(path, problem);
}

template <typename Int>
Status ReadInteger(const Json& json, const std::string& path, Int& out) {
  if (!json.is_number()) return TypeError(path, "an integer", json);
  // nlohmann keeps non-negative integers unsigned and negative ones signed;
  // anything else (a fraction, an exponent, a value past 64 bits) is a float.
  if (json.is_number_unsigned()) {
    const auto value = json.get<uint64_t>();
    if (std::in_range<Int>(value)) {
      out = static_cast<Int>(value);
      return Status::Ok();
    }
  } else if (json.is_number_integer()) {
    const auto value = json.get<int64_t>();
    if (std::in_range<Int>(value)) {
      out = static_cast<Int>(value);
      return Status::Ok();
    }
  }
  return PathError(path, "want an integer in [" + std::to_string(std::numeric_limits<Int>::min()) +
                             ", " + std::to_string(std::numeric_limits<Int>::max()) + "], got " +
                             json.dump());
}

}  // namespace

Result<Json> ParseJson(std::string_view text, const JsonLimits& limits) {
  return json_internal::ParseJson(
      text, {limits.max_bytes, limits.max_depth, limits.max_array_items, "body"});
}

Status ReadScalar(const Json& json, const std::string& path, std::string& out) {
  if (!json.is_string()) return TypeError(path, "a string", json);
  out = json.get_ref<const std::string&>();
  return Status::Ok();
}

Status ReadScalar(const Json& json, const std::string& path, int64_t& out) {
  return ReadInteger(json, path, out);
}

Status ReadScalar(const Json& json, const std::string& path, uint64_t& out) {
  return ReadInteger(json, path, out);
}

Status ReadScalar(const Json& json, const std::string& path, double& out) {
  if (!json.is_number()) return TypeError(path, "a number", json);
  out = json.get<double>();
  return Status::Ok();
}

Status ReadScalar(const Json& json, const std::string& path, bool& out) {
  if (!json.is_boolean()) return TypeError(path, "a boolean", json);
  out = json.get<bool>();
  return Status::Ok();
}

void Reader::AdoptRecordError(const Status& status) {
  if (status.ok()) return;
  status_ = status.code() == StatusCode::kInvalidArgument
                ? Status::InvalidArgument(path_ + "." + status.message())
                : status.WithContext(path_);
}

Status Reader::Finish() const {
  if (!status_.ok()) return status_;
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (std::find(known_.begin(), known_.end(), it.key()) == known_.end()) {
      return PathError(ChildPath(path_, it.key()), "unknown field");
    }
  }
  if (!missing_.empty()) return PathError(missing_, "missing required field");
  return Status::Ok();
}

Status ExpectObject(const Json& json, const std::string& path) {
  return json.is_object() ? Status::Ok() : TypeError(path, "an object", json);
}

Status ExpectArray(const Json& json, const std::string& path) {
  return json.is_array() ? Status::Ok() : TypeError(path, "an array", json);
}

}  // namespace kvgov::codec_internal
