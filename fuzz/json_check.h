#pragma once

// What every kvgov JSON decoder promises (include/kvgov/codec/json_codec.h),
// shared by the fuzz targets of the API bodies.

#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "kvgov/codec/json_codec.h"

namespace kvgov::fuzz {

/// Limits a fuzzer reaches with small inputs, each at most its default so
/// that a body these accept the defaults accept too.
inline JsonLimits SmallJsonLimits() { return JsonLimits{512, 4, 8}; }

/// A refused body: InvalidArgument or ResourceExhausted only (Internal is
/// how the codec reports an exception it did not expect), a message that
/// starts with the path of the offending value, and the size limit checked
/// before anything else.
inline void CheckJsonFailure(const Status& status, std::string_view text,
                             const JsonLimits& limits) {
  FUZZ_CHECK(CodeIsOneOf(status, StatusCode::kInvalidArgument, StatusCode::kResourceExhausted),
             "unexpected code: %s", Describe(status).c_str());
  FUZZ_CHECK(status.message().starts_with("$"), "error without a path: %s",
             Describe(status).c_str());
  if (text.size() > limits.max_bytes) {
    FUZZ_CHECK(status.code() == StatusCode::kResourceExhausted, "oversized body: %s",
               Describe(status).c_str());
  }
}

/// Every string a JSON decoder returns came out of a JSON string, which
/// the parser has already checked is Unicode: a decoder must not mint
/// invalid UTF-8 of its own.
inline void CheckUtf8(const std::string& text, const char* field) {
  FUZZ_CHECK(IsValidUtf8(text), "%s is not UTF-8", field);
}

inline void CheckUtf8(const std::vector<std::string>& texts, const char* field) {
  for (const std::string& text : texts) CheckUtf8(text, field);
}

/// The small-limits outcome of a decoder against its default-limits one:
/// tighter limits may refuse a body, never change what it decodes to or
/// turn a schema error into another schema error.
template <typename T, typename Equal>
void CheckLimitsAgree(const Result<T>& full, const Result<T>& bounded, Equal equal) {
  if (bounded.ok()) {
    FUZZ_CHECK(full.ok(), "accepted under small limits, refused under the defaults: %s",
               Describe(full.status()).c_str());
    FUZZ_CHECK(equal(*bounded, *full), "the limits changed the decoded value");
  } else if (bounded.status().code() != StatusCode::kResourceExhausted) {
    FUZZ_CHECK(!full.ok() && bounded.status() == full.status(), "small limits: %s, defaults: %s",
               Describe(bounded.status()).c_str(), Describe(full.status()).c_str());
  }
}

/// One body through `decode` under the default and the small limits:
/// `check` what each accepts, the refusals as CheckJsonFailure, and the
/// limits against each other as CheckLimitsAgree.
template <typename Decoded, typename Decode, typename Check, typename Same>
void RunJsonDecoder(std::string_view text, Decode decode, Check check, Same same) {
  const JsonLimits defaults;
  const JsonLimits small = SmallJsonLimits();
  const Result<Decoded> full = decode(text, defaults);
  const Result<Decoded> bounded = decode(text, small);
  for (const Result<Decoded>* result : {&full, &bounded}) {
    if (result->ok()) {
      check(**result);
    } else {
      CheckJsonFailure(result->status(), text, result == &full ? defaults : small);
    }
  }
  CheckLimitsAgree(full, bounded, same);
}

}  // namespace kvgov::fuzz
