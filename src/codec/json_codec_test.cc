#include "kvgov/codec/json_codec.h"

#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvgov {
namespace {

using ::testing::HasSubstr;

// Every builder sets every field to a value other than its default, so a
// field the codec forgets to write or read breaks a round trip.

EntryId FullId(std::string digest) {
  return EntryId{.digest = std::move(digest),
                 .media_type = MediaType::kKVSpan,
                 .length = 4096,
                 .unit = LengthUnit::kPositions};
}

DeletionCertificateRef FullCertificate() {
  return DeletionCertificateRef{
      .schema = "kvgov.deletion.v1", .subject = "span:abc", .digest = "deadbeef"};
}

Entry FullEntry() {
  return Entry{
      .id = FullId("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
      .plane = Plane::kKVTransfer,
      .source = Source::kRideEngine,
      .derivation = {.producer = "vllm",
                     .tool = "search",
                     .args_digest = "args-1",
                     .model_id = "llama",
                     .tokenizer_id = "llama-tok",
                     .serializer_id = "chatml-v2",
                     .position_mode = PositionMode::kRelocatable,
                     .source_refs = {FullId("src-1"), FullId("src-2")}},
      .validity = {.witness = "etag-7",
                   .admitted_at_epoch = "epoch-3",
                   .trust_epoch = std::numeric_limits<uint64_t>::max(),
                   .ttl_millis = 30000,
                   .policy_version = "policy-9"},
      .security = {.taint = Taint::kTrusted,
                   .scope = Scope::kFleet,
                   .admission_verdict = AdmissionVerdict::kRequireWitness,
                   .admitted_by = "operator",
                   .reason = "admitted by rule 2",
                   .deletion_certificate = FullCertificate()},
      .residency = {.tier = ResidencyTier::kCXL, .owner = "engine-a", .lease = "lease-1"},
      .coherence =
          {.consumers =
               {{.kind = "agent", .id = "c-1", .agent_id = "agent-7", .trace_id = "trace-1"},
                {.kind = "tool", .id = "c-2", .agent_id = "agent-8", .trace_id = "trace-2"}},
           .parents = {FullId("parent-1")},
           .invalidation_mode = InvalidationMode::kExternalRefutation},
      .metrics = {.hits = 1,
                  .misses = 2,
                  .fills = 3,
                  .evictions = 4,
                  .false_hit_faults = 5,
                  .prefill_tokens_saved = -6,
                  .bytes_transferred = 7,
                  .quality_delta_probe = -0.125,
                  .coverage = 0.1,
                  .faithfulness_probe = 0.75},
      .labels = {{"direction", "restore"}, {"odd key.with dots", "v"}, {"outcome", "ok"}},
  };
}

KVSpanReport FullSpan() {
  return KVSpanReport{.span_digest = "span-1",
                      .tokens = 512,
                      .model_id = "llama",
                      .tokenizer_id = "llama-tok",
                      .serializer_id = "kv-fp8",
                      .position_mode = PositionMode::kPrefixAligned,
                      .from_tier = ResidencyTier::kHBM,
                      .to_tier = ResidencyTier::kDisk,
                      .owner = "engine-b",
                      .lease = "lease-2",
                      .outcome = KVTransferOutcome::kFault,
                      .fault_reason = "nvme timeout",
                      .bytes_moved = 1 << 20,
                      .deletion_certificate = FullCertificate()};
}

NIXLLease FullLease() {
  return NIXLLease{.lease_id = "lease-9",
                   .trace_id = "trace-9",
                   .request_id = "req-9",
                   .remote_engine = "decode-3",
                   .span_digest = "span-9",
                   .tokens = -1,  // the codec keeps the type's range; lowerings judge sense
                   .model_id = "llama",
                   .tokenizer_id = "llama-tok",
                   .role = NIXLTransferRole::kPushWrite,
                   .event = NIXLLeaseEvent::kHeartbeat,
                   .granted_at_ms = 1000,
                   .expires_at_ms = 6000,
                   .ttl_ms = 5000,
                   .bytes_moved = 123456,
                   .witness = NIXLLeaseWitness::kHandoff};
}

ProviderCache FullProviderCache() {
  return ProviderCache{.provider = Provider::kAnthropic,
                       .model_id = "claude-x",
                       .cached_tokens = 1024,
                       .write_tokens = 256,
                       .prompt_tokens = 2048,
                       .serializer_id = "template-v3",
                       .breakpoint_mode = BreakpointMode::kExplicit,
                       .retention = "1h",
                       .first_diverge_at = 17,
                       .owner = "team-a",
                       .endpoint = "/v1/messages",
                       .reasoning_mode = "extended",
                       .tool_set_id = "tools-4",
                       .region = "eu-west-1"};
}

KVPrefix FullPrefix() {
  return KVPrefix{.token_ids = {1, -2, std::numeric_limits<int64_t>::min(),
                                std::numeric_limits<int64_t>::max()},
                  .model_id = "llama",
                  .tokenizer_id = "llama-tok",
                  .tier = ResidencyTier::kDRAM,
                  .owner = "kvgov-a",
                  .lease = "lease-3",
                  .reused_tokens = 64};
}

ToolResult FullToolResult() {
  return ToolResult{.key = "search:abc:7",
                    .event = ToolResultEvent::kRevoke,
                    .result_digest = "digest-1",
                    .size_bytes = 99,
                    .witness = "etag-1",
                    .saved_tokens = 12};
}

// Encodes, decodes, and checks the record survives and re-encodes to the
// same bytes (encoding is deterministic).
template <typename R, typename DecodeFn>
void ExpectRoundTrip(const R& record, DecodeFn decode) {
  const std::string json = EncodeJson(record);
  Result<R> decoded = decode(json, JsonLimits{});
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString() << "\n" << json;
  EXPECT_EQ(*decoded, record) << json;
  EXPECT_EQ(EncodeJson(*decoded), json);
}

TEST(JsonCodecRoundTripTest, FullEntry) { ExpectRoundTrip(FullEntry(), DecodeEntryJson); }

TEST(JsonCodecRoundTripTest, DefaultEntry) { ExpectRoundTrip(Entry{}, DecodeEntryJson); }

TEST(JsonCodecRoundTripTest, EntryForEveryPlaneWithItsSource) {
  for (const auto& [plane, spelling] : EnumSpelling<Plane>::kValues) {
    Entry e = FullEntry();
    e.plane = plane;
    e.source = SourceForPlane(plane);
    SCOPED_TRACE(spelling);
    ExpectRoundTrip(e, DecodeEntryJson);
  }
}

TEST(JsonCodecRoundTripTest, LookupVerdictWithEntry) {
  LookupVerdict v;
  v.kind = LookupKind::kRevalidate;
  v.reason = LookupReason::kTokenizerMismatch;
  v.entry = FullEntry();
  v.handle = FullId("handle-1");
  v.meta = {{"provider_cache", "cost_latency_only"}, {"why", "tokenizer drift"}};
  ExpectRoundTrip(v, DecodeLookupVerdictJson);
}

TEST(JsonCodecRoundTripTest, LookupVerdictWithoutEntryOmitsIt) {
  LookupVerdict v;
  v.kind = LookupKind::kFault;
  v.reason = LookupReason::kResidencyFault;
  v.handle = FullId("handle-2");
  v.meta = {{"k", "v"}};
  ExpectRoundTrip(v, DecodeLookupVerdictJson);
  EXPECT_THAT(EncodeJson(v), ::testing::Not(HasSubstr("\"entry\"")));
}

TEST(JsonCodecRoundTripTest, KVTransfer) {
  ExpectRoundTrip(KVTransfer{KVTransferDirection::kMigrate, FullSpan()}, DecodeKVTransferJson);
}

TEST(JsonCodecRoundTripTest, MooncakeEvent) {
  ExpectRoundTrip(MooncakeEvent{MooncakeOperation::kMaterialize, FullSpan()},
                  DecodeMooncakeEventJson);
}

TEST(JsonCodecRoundTripTest, LMCacheEvent) {
  ExpectRoundTrip(LMCacheEvent{LMCacheOperation::kEvict, FullSpan()}, DecodeLMCacheEventJson);
}

TEST(JsonCodecRoundTripTest, NIXLLease) { ExpectRoundTrip(FullLease(), DecodeNIXLLeaseJson); }

TEST(JsonCodecRoundTripTest, ProviderCache) {
  ExpectRoundTrip(FullProviderCache(), DecodeProviderCacheJson);
}

TEST(JsonCodecRoundTripTest, KVPrefixKeepsTheFullInt64Range) {
  ExpectRoundTrip(FullPrefix(), DecodeKVPrefixJson);
}

TEST(JsonCodecRoundTripTest, ToolResult) {
  ExpectRoundTrip(FullToolResult(), DecodeToolResultJson);
}

TEST(JsonCodecEncodeTest, EntryCarriesFormatVersionAndSortedKeys) {
  const std::string json = EncodeJson(Entry{});
  EXPECT_THAT(json, HasSubstr("\"format_version\":1"));
  EXPECT_LT(json.find("\"coherence\""), json.find("\"derivation\""));
  EXPECT_LT(json.find("\"derivation\""), json.find("\"format_version\""));
}

TEST(JsonCodecEncodeTest, SpanRecordsAreFlat) {
  const std::string json = EncodeJson(KVTransfer{KVTransferDirection::kRestore, FullSpan()});
  EXPECT_THAT(json, HasSubstr("\"direction\":\"restore\""));
  EXPECT_THAT(json, HasSubstr("\"span_digest\":\"span-1\""));
  EXPECT_THAT(json, HasSubstr("\"deletion_certificate\":{"));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("\"span\"")));
}

TEST(JsonCodecEncodeTest, InvalidUtf8IsReplacedNotThrown) {
  Entry e;
  e.labels["k"] = "\xff";
  const std::string json = EncodeJson(e);
  Result<Entry> decoded = DecodeEntryJson(json);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->labels.at("k"), "\xEF\xBF\xBD");
}

TEST(JsonCodecDecodeTest, MinimalEntryTakesDefaultsAndTheSourceOfItsPlane) {
  Result<Entry> e = DecodeEntryJson(R"({"id":{"digest":"d"},"plane":"provider"})");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  Entry want;
  want.id.digest = "d";
  want.plane = Plane::kProvider;
  want.source = Source::kProvider;
  EXPECT_EQ(*e, want);
}

TEST(JsonCodecDecodeTest, FlatKVTransferWithOnlyRequiredFields) {
  Result<KVTransfer> t = DecodeKVTransferJson(R"({"direction":"evict","span_digest":"s"})");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  KVTransfer want;
  want.direction = KVTransferDirection::kEvict;
  want.span.span_digest = "s";
  EXPECT_EQ(*t, want);
}

TEST(JsonCodecDecodeTest, DeepNestingIsRejectedWithoutRecursion) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  Result<Entry> e = DecodeEntryJson(deep, JsonLimits{.max_bytes = 1 << 20});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kResourceExhausted);
}

TEST(JsonCodecDecodeTest, LimitsAreInclusive) {
  const std::string body = R"({"token_ids":[1,2],"model_id":"m"})";
  const JsonLimits exact{.max_bytes = body.size(), .max_depth = 2, .max_array_items = 2};
  Result<KVPrefix> p = DecodeKVPrefixJson(body, exact);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->token_ids, (std::vector<int64_t>{1, 2}));
}

TEST(JsonCodecDecodeTest, MessagesLookRight) {
  // Pins the whole text of one message of each kind, so a wording change is
  // a deliberate one (docs/formats/envelope.md quotes them).
  EXPECT_EQ(DecodeEntryJson(R"({"id":{"digest":"d"},"plane":"blob","security":{"taint":"trustd"}})")
                .status()
                .ToString(),
            "invalid_argument: $.security.taint: unknown taint 'trustd' (want one of: tainted, "
            "trusted, quarantined)");
  EXPECT_EQ(DecodeToolResultJson(R"({"event":"hit","key":"k","sizebytes":1})").status().ToString(),
            "invalid_argument: $.sizebytes: unknown field");
  EXPECT_EQ(DecodeEntryJson("[[[", JsonLimits{.max_depth = 2}).status().ToString(),
            "resource_exhausted: $[0][0]: nesting deeper than 2");
}

TEST(JsonCodecDecodeTest, ParseErrorsDoNotEchoRawInput) {
  // The message ends up in JSON error bodies and logs; raw input bytes
  // (here invalid UTF-8) must not ride along.
  const std::string msg = DecodeEntryJson("{\"k\":\"\xff\"}").status().message();
  EXPECT_THAT(msg, HasSubstr("$: malformed JSON: parse error at line 1, column 7"));
  EXPECT_THAT(msg, HasSubstr("ill-formed UTF-8 byte"));
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("last read")));
  for (const char c : msg) EXPECT_TRUE(c >= 0x20 && c <= 0x7e) << static_cast<int>(c);
}

// One bad document, the code it must fail with, and the exact path and
// problem the message must name.
using DecodeFn = Result<bool> (*)(std::string_view, const JsonLimits&);

struct ErrorCase {
  const char* name;
  DecodeFn decode;
  std::string json;
  JsonLimits limits;
  StatusCode code;
  std::string path;     // must appear as "<path>: "
  std::string problem;  // must appear after it
};

// Names the case in gtest output instead of dumping its bytes.
void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

template <typename R, Result<R> (*kDecode)(std::string_view, const JsonLimits&)>
Result<bool> Run(std::string_view text, const JsonLimits& limits) {
  Result<R> r = kDecode(text, limits);
  if (!r.ok()) return r.status();
  return true;
}

constexpr auto kEntry = Run<Entry, DecodeEntryJson>;
constexpr auto kVerdict = Run<LookupVerdict, DecodeLookupVerdictJson>;
constexpr auto kTransfer = Run<KVTransfer, DecodeKVTransferJson>;
constexpr auto kMooncake = Run<MooncakeEvent, DecodeMooncakeEventJson>;
constexpr auto kLMCache = Run<LMCacheEvent, DecodeLMCacheEventJson>;
constexpr auto kLease = Run<NIXLLease, DecodeNIXLLeaseJson>;
constexpr auto kProvider = Run<ProviderCache, DecodeProviderCacheJson>;
constexpr auto kPrefix = Run<KVPrefix, DecodeKVPrefixJson>;
constexpr auto kTool = Run<ToolResult, DecodeToolResultJson>;

ErrorCase Bad(const char* name, DecodeFn decode, std::string json, std::string path,
              std::string problem) {
  return ErrorCase{name,
                   decode,
                   std::move(json),
                   JsonLimits{},
                   StatusCode::kInvalidArgument,
                   std::move(path),
                   std::move(problem)};
}

ErrorCase Over(const char* name, DecodeFn decode, std::string json, JsonLimits limits,
               std::string path, std::string problem) {
  return ErrorCase{name,
                   decode,
                   std::move(json),
                   limits,
                   StatusCode::kResourceExhausted,
                   std::move(path),
                   std::move(problem)};
}

// A valid entry with `extra` spliced in as further top-level members.
std::string EntryWith(std::string_view extra) {
  return R"({"id":{"digest":"d","length":3},"plane":"blob")" + std::string(extra) + "}";
}

std::vector<ErrorCase> ErrorCases() {
  return {
      Bad("WrongType", kEntry, R"({"id":{"digest":5},"plane":"blob"})", "$.id.digest",
          "want a string, got number"),
      Bad("ObjectExpected", kEntry, EntryWith(R"(,"security":[])"), "$.security",
          "want an object, got array"),
      Bad("TopLevelNotAnObject", kEntry, "[1,2]", "$", "want an object, got array"),
      Bad("NullIsNotAbsent", kEntry, EntryWith(R"(,"residency":{"owner":null})"),
          "$.residency.owner", "want a string, got null"),
      Bad("UnknownEnum", kEntry, EntryWith(R"(,"security":{"taint":"trustd"})"), "$.security.taint",
          "unknown taint 'trustd' (want one of: tainted, trusted, quarantined)"),
      Bad("EnumCaseMatters", kEntry, EntryWith(R"(,"residency":{"tier":"HBM"})"),
          "$.residency.tier", "unknown residency tier 'HBM'"),
      Bad("UnknownEnumInArray", kEntry,
          EntryWith(
              R"(,"coherence":{"parents":[{"digest":"a"},{"digest":"b","media_type":"blob"}]})"),
          "$.coherence.parents[1].media_type", "unknown media type 'blob'"),
      Bad("MissingRequired", kEntry, R"({"id":{"digest":"d"}})", "$.plane",
          "missing required field"),
      Bad("MissingRequiredNested", kEntry, R"({"id":{"length":1},"plane":"blob"})", "$.id.digest",
          "missing required field"),
      Bad("UnknownField", kEntry, EntryWith(R"(,"security":{"trustd":"yes"})"), "$.security.trustd",
          "unknown field"),
      Bad("MisspeltRequiredFieldIsReportedAsUnknown", kLease,
          R"({"lease_idd":"l","event":"create","role":"prefill_pin"})", "$.lease_idd",
          "unknown field"),
      Bad("DuplicateKey", kEntry, EntryWith(R"(,"security":{"taint":"trusted","taint":"tainted"})"),
          "$.security.taint", "duplicate key"),
      Bad("BadSyntax", kEntry, R"({"id":{"digest":"d"},)", "$", "malformed JSON"),
      Bad("TrailingGarbage", kEntry, EntryWith("") + "x", "$", "malformed JSON"),
      Bad("InvalidUtf8", kEntry, EntryWith(",\"labels\":{\"k\":\"\xff\"}"), "$", "malformed JSON"),
      Over("OverMaxBytes", kEntry, EntryWith(""), JsonLimits{.max_bytes = 10}, "$",
           "body is 47 bytes, over the limit of 10"),
      Over("OverMaxDepth", kEntry, EntryWith(R"(,"coherence":{"consumers":[{"id":"c"}]})"),
           JsonLimits{.max_depth = 3}, "$.coherence.consumers[0]", "nesting deeper than 3"),
      Over("OverMaxArrayItems", kPrefix, R"({"token_ids":[1,2,3],"model_id":"m"})",
           JsonLimits{.max_array_items = 2}, "$.token_ids", "array has more than 2 items"),
      Bad("SourcePlaneMismatch", kEntry,
          R"({"id":{"digest":"d"},"plane":"provider","source":"native"})", "$.source",
          "'native' does not match plane 'provider' (want 'provider')"),
      Bad("NegativeLength", kEntry, R"({"id":{"digest":"d","length":-1},"plane":"blob"})",
          "$.id.length", "must be >= 0, got -1"),
      Bad("NegativeLengthInParent", kEntry,
          EntryWith(R"(,"coherence":{"parents":[{"digest":"p","length":-5}]})"),
          "$.coherence.parents[0].length", "must be >= 0, got -5"),
      Bad("EmptyLabelKey", kEntry, EntryWith(R"(,"labels":{"":"v"})"), "$.labels", "empty key"),
      Bad("LabelValueNotString", kEntry, EntryWith(R"(,"labels":{"a b":1})"), R"($.labels["a b"])",
          "want a string, got number"),
      Bad("WrongFormatVersion", kEntry, EntryWith(R"(,"format_version":2)"), "$.format_version",
          "unsupported version 2 (want 1)"),
      Bad("FloatForInteger", kEntry, R"({"id":{"digest":"d","length":1.5},"plane":"blob"})",
          "$.id.length", "want an integer in [-9223372036854775808, 9223372036854775807], got 1.5"),
      Bad("IntegralFloatIsStillAFloat", kTransfer,
          R"({"direction":"route","span_digest":"s","tokens":2.0})", "$.tokens",
          "want an integer in"),
      Bad("StringForInteger", kTransfer, R"({"direction":"route","span_digest":"s","tokens":"2"})",
          "$.tokens", "want an integer, got string"),
      Bad("NegativeForUnsigned", kEntry, EntryWith(R"(,"metrics":{"hits":-1})"), "$.metrics.hits",
          "want an integer in [0, 18446744073709551615], got -1"),
      Bad("Int64Overflow", kTransfer,
          R"({"direction":"route","span_digest":"s","bytes_moved":9223372036854775808})",
          "$.bytes_moved", "got 9223372036854775808"),
      Bad("Uint64Overflow", kEntry, EntryWith(R"(,"metrics":{"fills":18446744073709551616})"),
          "$.metrics.fills", "want an integer in [0, 18446744073709551615]"),
      Bad("StringForDouble", kEntry, EntryWith(R"(,"metrics":{"coverage":"0.5"})"),
          "$.metrics.coverage", "want a number, got string"),
      Bad("VerdictEntryPath", kVerdict,
          R"({"kind":"hit","entry":{"id":{"digest":"d"},"plane":"provider","source":"native"}})",
          "$.entry.source", "does not match plane 'provider'"),
      Bad("VerdictUnknownKind", kVerdict, R"({"kind":"abstain"})", "$.kind",
          "unknown lookup kind 'abstain'"),
      Bad("TransferMissingSpanDigest", kTransfer, R"({"direction":"offload"})", "$.span_digest",
          "missing required field"),
      Bad("TransferUnknownDirection", kTransfer, R"({"direction":"sideways","span_digest":"s"})",
          "$.direction", "unknown kv transfer direction 'sideways'"),
      Bad("TransferNestedSpanIsUnknown", kTransfer,
          R"({"direction":"offload","span_digest":"s","span":{}})", "$.span", "unknown field"),
      Bad("TransferCertificateField", kTransfer,
          R"({"direction":"offload","span_digest":"s","deletion_certificate":{"schema":1}})",
          "$.deletion_certificate.schema", "want a string, got number"),
      Bad("MooncakeUnknownOperation", kMooncake, R"({"operation":"get","span_digest":"s"})",
          "$.operation", "unknown mooncake operation 'get'"),
      Bad("LMCacheMissingOperation", kLMCache, R"({"span_digest":"s"})", "$.operation",
          "missing required field"),
      Bad("LeaseMissingRole", kLease, R"({"lease_id":"l","event":"create"})", "$.role",
          "missing required field"),
      Bad("ProviderMissingModel", kProvider, R"({"provider":"openai"})", "$.model_id",
          "missing required field"),
      Bad("PrefixTokenNotInteger", kPrefix, R"({"token_ids":[1,"2"],"model_id":"m"})",
          "$.token_ids[1]", "want an integer, got string"),
      Bad("ToolResultMissingKey", kTool, R"({"event":"hit"})", "$.key", "missing required field"),
  };
}

class JsonCodecErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(JsonCodecErrorTest, NamesPathAndProblem) {
  const ErrorCase& c = GetParam();
  Result<bool> r = c.decode(c.json, c.limits);
  ASSERT_FALSE(r.ok()) << c.json;
  EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
  EXPECT_THAT(r.status().message(), ::testing::StartsWith(c.path + ": "));
  EXPECT_THAT(r.status().message(), HasSubstr(c.problem));
}

INSTANTIATE_TEST_SUITE_P(All, JsonCodecErrorTest, ::testing::ValuesIn(ErrorCases()),
                         [](const ::testing::TestParamInfo<ErrorCase>& param_info) {
                           return std::string(param_info.param.name);
                         });

}  // namespace
}  // namespace kvgov
