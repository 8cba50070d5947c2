#pragma once

// Internal to kvgov_codec. Each record's wire schema is written once, as a
// Schema<R>::Fields(visitor, record) that names every field with its key and
// whether it is required. Writer runs a schema to build JSON; Reader runs the
// same schema to decode it, tracking the path of every value so each error
// names exactly where it is. A new record therefore needs a schema and
// nothing else.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "json/bounded_json.h"
#include "kvgov/codec/json_codec.h"
#include "kvgov/core/enum_spelling.h"
#include "kvgov/core/status.h"

namespace kvgov::codec_internal {

// dump() throws only on invalid UTF-8, which the replace handler writes as
// U+FFFD instead, so no exception can leave an encoder.
inline std::string Dump(const nlohmann::json& json) {
  return json.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

using json_internal::ChildPath;
using json_internal::IndexPath;
using json_internal::Json;
using json_internal::PathError;

/// The shared bounded parser (json/bounded_json.h) under the codec's
/// limits.
Result<Json> ParseJson(std::string_view text, const JsonLimits& limits);

/// Scalar readers: check the JSON type and the C++ range, no coercion.
Status ReadScalar(const Json& json, const std::string& path, std::string& out);
Status ReadScalar(const Json& json, const std::string& path, int64_t& out);
Status ReadScalar(const Json& json, const std::string& path, uint64_t& out);
Status ReadScalar(const Json& json, const std::string& path, double& out);
Status ReadScalar(const Json& json, const std::string& path, bool& out);

/// InvalidArgument "<path>: want an object, got array" unless `json` is an
/// object.
Status ExpectObject(const Json& json, const std::string& path);
/// The same for arrays.
Status ExpectArray(const Json& json, const std::string& path);

/// Specialised once per record type in json_codec.cc with
///   static void Fields(auto& visitor, auto& record);
/// which calls, for each field, visitor.Required(key, field) or
/// visitor.Optional(key, field[, fallback]), and may add visitor.Expect(key,
/// holds, problem) and visitor.Validate(check) for decode-only invariants.
template <typename T>
struct Schema;

template <typename T>
inline constexpr bool kIsVector = false;
template <typename T>
inline constexpr bool kIsVector<std::vector<T>> = true;

template <typename T>
inline constexpr bool kIsOptional = false;
template <typename T>
inline constexpr bool kIsOptional<std::optional<T>> = true;

using StringMap = std::map<std::string, std::string>;

template <typename T>
Json ToJson(const T& value);
template <typename T>
Status FromJson(const Json& json, const std::string& path, T& out);

/// Runs a schema forwards: every field is written, so encoding is total and
/// deterministic. An empty optional is omitted rather than written as null.
class Writer {
 public:
  template <typename T>
  void Required(std::string_view key, const T& field) {
    Write(key, field);
  }
  template <typename T>
  void Optional(std::string_view key, const T& field) {
    Write(key, field);
  }
  template <typename T>
  void Optional(std::string_view key, const T& field, const T& /*fallback*/) {
    Write(key, field);
  }
  // Invariants are the decoder's business: an encoder writes what it holds.
  template <typename Problem>
  void Expect(std::string_view /*key*/, bool /*holds*/, Problem /*problem*/) {}
  template <typename Check>
  void Validate(Check /*check*/) {}

  Json Take() && { return std::move(object_); }

 private:
  template <typename T>
  void Write(std::string_view key, const T& field) {
    if constexpr (kIsOptional<T>) {
      if (field.has_value()) object_[std::string(key)] = ToJson(*field);
    } else {
      object_[std::string(key)] = ToJson(field);
    }
  }

  Json object_ = Json::object();
};

/// Runs a schema backwards over one JSON object. The first error wins and
/// later reads become no-ops, except that a missing required field is held
/// back until Finish: when it sits beside an unknown field, the unknown one
/// is usually its misspelling and is the more useful report.
class Reader {
 public:
  // REQUIRES: object.is_object(); `object` and `path` outlive the reader.
  Reader(const Json& object, const std::string& path) : object_(object), path_(path) {}

  template <typename T>
  void Required(std::string_view key, T& field) {
    if (!Read(key, field) && status_.ok() && missing_.empty()) missing_ = ChildPath(path_, key);
  }
  template <typename T>
  void Optional(std::string_view key, T& field) {
    Read(key, field);
  }
  /// An absent field takes `fallback`, which may depend on fields read
  /// before it.
  template <typename T>
  void Optional(std::string_view key, T& field, const T& fallback) {
    if (!Read(key, field)) field = fallback;
  }
  /// Fails the read at `key` with problem() unless `holds`. Skipped after an
  /// earlier error, whose fields may hold defaults that would mislead.
  template <typename Problem>
  void Expect(std::string_view key, bool holds, Problem problem) {
    if (!holds && Clean()) status_ = PathError(ChildPath(path_, key), problem());
  }
  /// Runs a whole-record check (returning Status) once the fields are read.
  /// Core checks word errors "<field.path>: <problem>" relative to the
  /// record, so this object's path is joined on to make it absolute.
  template <typename Check>
  void Validate(Check check) {
    if (Clean()) AdoptRecordError(check());
  }

  /// The first error, then an unknown field, then a missing required one.
  Status Finish() const;

 private:
  bool Clean() const { return status_.ok() && missing_.empty(); }
  void AdoptRecordError(const Status& status);

  // Returns whether the key is present. Records the key as known either way,
  // so Finish can tell unknown fields apart.
  template <typename T>
  bool Read(std::string_view key, T& field) {
    known_.push_back(key);
    auto it = object_.find(key);
    if (it == object_.end()) return false;
    if (!status_.ok()) return true;
    if constexpr (kIsOptional<T>) {
      status_ = FromJson(*it, ChildPath(path_, key), field.emplace());
    } else {
      status_ = FromJson(*it, ChildPath(path_, key), field);
    }
    return true;
  }

  const Json& object_;
  const std::string& path_;
  Status status_;
  std::string missing_;  // path of the first missing required field
  std::vector<std::string_view> known_;
};

template <typename T>
Json ToJson(const T& value) {
  if constexpr (std::is_same_v<T, std::string> || std::is_arithmetic_v<T> ||
                std::is_same_v<T, StringMap>) {
    return Json(value);
  } else if constexpr (std::is_enum_v<T>) {
    return Json(std::string(ToString(value)));
  } else if constexpr (kIsVector<T>) {
    Json out = Json::array();
    for (const auto& item : value) out.push_back(ToJson(item));
    return out;
  } else {
    Writer writer;
    Schema<T>::Fields(writer, value);
    return std::move(writer).Take();
  }
}

template <typename T>
Status FromJson(const Json& json, const std::string& path, T& out) {
  if constexpr (std::is_same_v<T, std::string> || std::is_arithmetic_v<T>) {
    return ReadScalar(json, path, out);
  } else if constexpr (std::is_enum_v<T>) {
    std::string spelling;
    KVGOV_RETURN_IF_ERROR(ReadScalar(json, path, spelling));
    Result<T> parsed = ParseEnum<T>(spelling);
    if (!parsed.ok()) return parsed.status().WithContext(path);
    out = *parsed;
    return Status::Ok();
  } else if constexpr (kIsVector<T>) {
    KVGOV_RETURN_IF_ERROR(ExpectArray(json, path));
    out.clear();
    out.reserve(json.size());
    for (std::size_t i = 0; i < json.size(); ++i) {
      KVGOV_RETURN_IF_ERROR(FromJson(json[i], IndexPath(path, i), out.emplace_back()));
    }
    return Status::Ok();
  } else if constexpr (std::is_same_v<T, StringMap>) {
    KVGOV_RETURN_IF_ERROR(ExpectObject(json, path));
    out.clear();
    for (auto it = json.begin(); it != json.end(); ++it) {
      KVGOV_RETURN_IF_ERROR(ReadScalar(it.value(), ChildPath(path, it.key()), out[it.key()]));
    }
    return Status::Ok();
  } else {
    KVGOV_RETURN_IF_ERROR(ExpectObject(json, path));
    Reader reader(json, path);
    Schema<T>::Fields(reader, out);
    return reader.Finish();
  }
}

/// A whole document of a type with a Schema, under `limits`. The reader
/// checks every type before it reads a value, so a throw here is a codec
/// bug; still, none leaves the module: it becomes Internal naming `codec`.
template <typename R>
Result<R> DecodeDocument(std::string_view text, const JsonLimits& limits, std::string_view codec) {
  try {
    KVGOV_ASSIGN_OR_RETURN(const Json doc, ParseJson(text, limits));
    R record;
    KVGOV_RETURN_IF_ERROR(FromJson(doc, "$", record));
    return record;
  } catch (const Json::exception& e) {
    return Status::Internal(std::string(codec) + ": " + e.what());
  }
}

}  // namespace kvgov::codec_internal
