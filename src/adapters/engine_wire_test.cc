#include "kvgov/adapters/engine_wire.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <msgpack.hpp>

#include "adapters/one_pass_decoder.h"
#include "kvgov/core/engine_events.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/sim/event_wire.h"

namespace kvgov::adapters {
namespace {

// ---------------------------------------------------------------------------
// Helpers.

std::string ReadGolden(const std::string& name) {
  const std::string path = std::string(KVGOV_ADAPTERS_TESTDATA_DIR) + "/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Builds payloads by hand, element by element, so each test shows exactly
// which bytes it feeds the decoder.
class Pack {
 public:
  Pack() : packer_(buffer_) {}
  Pack& Array(uint32_t n) {
    packer_.pack_array(n);
    return *this;
  }
  Pack& Map(uint32_t n) {
    packer_.pack_map(n);
    return *this;
  }
  Pack& Str(std::string_view s) {
    packer_.pack_str(static_cast<uint32_t>(s.size()));
    packer_.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
    return *this;
  }
  Pack& Bin(std::string_view s) {
    packer_.pack_bin(static_cast<uint32_t>(s.size()));
    packer_.pack_bin_body(s.data(), static_cast<uint32_t>(s.size()));
    return *this;
  }
  Pack& Int(int64_t v) {
    packer_.pack(v);
    return *this;
  }
  Pack& UInt(uint64_t v) {
    packer_.pack(v);
    return *this;
  }
  // Always a float64, as Python packs floats: msgpack-cxx would pack a
  // whole-valued double as an int.
  Pack& Float(double v) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    char bytes[9] = {'\xcb'};
    for (int i = 0; i < 8; ++i) bytes[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
    return Raw(std::string_view(bytes, sizeof bytes));
  }
  Pack& Bool(bool v) {
    packer_.pack(v);
    return *this;
  }
  Pack& Nil() {
    packer_.pack_nil();
    return *this;
  }
  Pack& Ints(const std::vector<int64_t>& values) {
    Array(static_cast<uint32_t>(values.size()));
    for (int64_t v : values) Int(v);
    return *this;
  }
  Pack& Raw(std::string_view bytes) {
    buffer_.write(bytes.data(), bytes.size());
    return *this;
  }
  std::string Bytes() const { return std::string(buffer_.data(), buffer_.size()); }

 private:
  msgpack::sbuffer buffer_;
  msgpack::packer<msgpack::sbuffer> packer_;
};

std::vector<int64_t> Tokens(int64_t start, int64_t count) {
  std::vector<int64_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), start);
  return tokens;
}

EngineEventBatch Decoded(const std::string& payload) {
  Result<EngineEventBatch> batch = DecodeEngineBatch(payload);
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  return batch.ok() ? *batch : EngineEventBatch{};
}

EngineEventBatch DecodedMooncake(const std::string& payload) {
  Result<EngineEventBatch> batch = DecodeMooncakeEvents(payload);
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  return batch.ok() ? *batch : EngineEventBatch{};
}

// A positional batch [ts, [one event], 0] whose single event the caller packs.
template <typename EventFn>
std::string OneEventBatch(EventFn event) {
  Pack p;
  p.Array(3).Float(1.5).Array(1);
  event(p);
  p.Int(0);
  return p.Bytes();
}

void ExpectSchemaError(const Result<EngineEventBatch>& result, const std::string& message) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument) << result.status().ToString();
  EXPECT_EQ(result.status().message(), message);
  EXPECT_EQ(DecodeErrorReason(result.status()), "bad_schema");
}

constexpr double kTs = 1789095808.83;
constexpr EngineHash kBig = 0xF0E1D2C3B4A59687ull;

// ---------------------------------------------------------------------------
// Golden payloads (testdata/make_golden.py), decoded to exact records.

TEST(EngineWireGoldenTest, LegacyPositionalWithTrailingFieldsOmitted) {
  EngineEventBatch want;
  want.ts = kTs;
  BlockStored first;
  first.block_hashes = {1, kBig};
  first.token_ids = Tokens(100, 8);
  first.block_size = 4;
  BlockStored second;
  second.block_hashes = {3};
  second.parent_block_hash = kBig;
  second.token_ids = Tokens(200, 4);
  second.block_size = 4;
  second.medium = "GPU";
  want.events = {first, second, BlockRemoved{{1}, "", 0}, BlockRemoved{{kBig}, "GPU", 0},
                 AllBlocksCleared{}};
  EXPECT_EQ(Decoded(ReadGolden("vllm_legacy_positional.msgpack")), want);
}

TEST(EngineWireGoldenTest, VllmV026MapEventsInPositionalBatch) {
  EngineEventBatch want;
  want.ts = kTs;
  want.dp_rank = 0;
  BlockStored salted;
  salted.block_hashes = {11, 12};
  salted.token_ids = Tokens(0, 32);
  salted.block_size = 16;
  salted.medium = "GPU";
  salted.extra_keys = {R"(["s1"])", ""};
  salted.kv_cache_spec_kind = "full_attention";
  BlockStored lora;
  lora.block_hashes = {13};
  lora.parent_block_hash = 12;
  lora.token_ids = Tokens(32, 16);
  lora.block_size = 16;
  lora.lora_name = "adapter-a";
  lora.medium = "CPU";
  lora.extra_keys = {R"(["adapter-a",["mm-0",4],{"bin":"01ab"},true,-3])"};
  lora.group_idx = 1;
  lora.kv_cache_spec_kind = "sliding_window";
  lora.kv_cache_spec_sliding_window = 4096;
  want.events = {salted, lora, BlockRemoved{{11}, "GPU", 0}, AllBlocksCleared{}};
  EXPECT_EQ(Decoded(ReadGolden("vllm_v026_map_events.msgpack")), want);
}

TEST(EngineWireGoldenTest, VllmStorageTiersWithLocality) {
  EngineEventBatch want;
  want.ts = kTs;
  want.dp_rank = 0;
  BlockStored remote_fs;
  remote_fs.block_hashes = {31};
  remote_fs.token_ids = Tokens(0, 4);
  remote_fs.block_size = 4;
  remote_fs.medium = "FS";
  remote_fs.kv_cache_spec_kind = "full_attention";
  remote_fs.locality = "REMOTE";
  BlockStored local_obj;
  local_obj.block_hashes = {32};
  local_obj.parent_block_hash = 31;
  local_obj.token_ids = Tokens(4, 4);
  local_obj.block_size = 4;
  local_obj.medium = "OBJ";
  local_obj.kv_cache_spec_kind = "full_attention";
  local_obj.locality = "LOCAL";
  want.events = {remote_fs, local_obj, BlockRemoved{{31}, "FS", 0, "REMOTE"}};
  EXPECT_EQ(Decoded(ReadGolden("vllm_storage_locality.msgpack")), want);
}

TEST(EngineWireGoldenTest, SglangSaltedPositionalAndMapEventsWithEagleBigrams) {
  EngineEventBatch want;
  want.ts = kTs;
  want.dp_rank = 1;
  BlockStored positional;
  positional.block_hashes = {static_cast<EngineHash>(-5), 6};
  positional.token_ids = Tokens(10, 4);
  positional.block_size = 2;
  positional.medium = "CPU_PINNED";
  positional.extra_keys = {R"(["tenant-salt"])", ""};
  BlockStored eagle;
  eagle.block_hashes = {7};
  eagle.token_ids = {20, 21};
  eagle.block_size = 2;
  eagle.medium = "EXTERNAL";
  eagle.extra_keys = {R"(["tenant-salt"])"};
  want.events = {positional, eagle};
  EXPECT_EQ(Decoded(ReadGolden("sglang_salted_eagle.msgpack")), want);
}

TEST(EngineWireGoldenTest, MapBatchWithMapEventsCountsWhatItSkips) {
  EngineEventBatch want;
  want.ts = kTs;
  want.dp_rank = 3;
  BlockStored stored;
  stored.block_hashes = {21};
  stored.token_ids = Tokens(0, 16);
  stored.block_size = 16;
  want.events = {stored, BlockRemoved{{21}, "", 0}};
  want.ignored.unknown_fields = 1;       // event_version
  want.ignored.unknown_event_types = 1;  // BlockPinned
  EXPECT_EQ(Decoded(ReadGolden("vllm_map_batch_map_events.msgpack")), want);
}

TEST(EngineWireGoldenTest, SglangCpuTier1WithNegativeInt64Hash) {
  constexpr EngineHash kNegative = 0xEEDDCCBBAA998878ull;  // -0x1122334455667788
  EngineEventBatch want;
  want.ts = kTs;
  want.dp_rank = 0;
  BlockStored stored;
  stored.block_hashes = {kNegative, 42};
  stored.parent_block_hash = 0xFFFFFFFFFFFFFFFFull;  // -1
  stored.token_ids = Tokens(7, 4);
  stored.block_size = 2;
  stored.medium = "CPU_TIER1";
  want.events = {stored, BlockRemoved{{kNegative}, "CPU_TIER1", 0}};
  EngineEventBatch got = Decoded(ReadGolden("sglang_cpu_tier1_negative_hash.msgpack"));
  EXPECT_EQ(got, want);
  EXPECT_EQ(TierForMedium(std::get<BlockStored>(got.events.at(0)).medium), ResidencyTier::kDRAM);
}

TEST(EngineWireGoldenTest, BytesHashesOf32And4Bytes) {
  constexpr EngineHash kDigestTail = 0x18191A1B1C1D1E1Full;  // bytes 24..31 of 00 01 .. 1f
  constexpr EngineHash kShort = 0xDEADBEEFull;               // left-padded
  EngineEventBatch want;
  want.ts = kTs;
  BlockStored stored;
  stored.block_hashes = {kDigestTail, kShort};
  stored.parent_block_hash = kShort;
  stored.token_ids = Tokens(0, 32);
  stored.block_size = 16;
  stored.medium = "GPU";
  want.events = {stored, BlockRemoved{{kDigestTail}, "GPU", 0}};
  EXPECT_EQ(Decoded(ReadGolden("vllm_bytes_hashes.msgpack")), want);
}

TEST(EngineWireGoldenTest, MooncakeMasterBatchStoredRemovedCleared) {
  constexpr EngineHash kSeq = 0xFEDCBA9876543210ull;
  EngineEventBatch want;
  want.ts = 1760000000.123;
  want.dp_rank = 0;
  BlockStored stored;
  stored.block_hashes = {kSeq};
  stored.block_size = 16;
  stored.medium = "cpu";
  stored.extra_keys = {R"(["mooncake","default",null])"};
  stored.group_idx = 2;
  want.events = {stored, BlockRemoved{{kSeq}, "disk", 0}, AllBlocksCleared{}};
  EXPECT_EQ(DecodedMooncake(ReadGolden("mooncake_batch.msgpack")), want);
}

TEST(EngineWireGoldenTest, MooncakeSingleRfcEventMap) {
  EngineEventBatch want;
  want.ts = 1739145600.0;
  want.dp_rank = 1;
  BlockStored stored;
  stored.block_hashes = {1234567890, 9876543210, 1122334455};
  stored.parent_block_hash = 9999999999;
  stored.block_size = 64;
  stored.medium = "gpu";
  stored.extra_keys = {R"(["mooncake","tenant-a","salt-1"])", "", ""};
  want.events = {stored};
  EXPECT_EQ(DecodedMooncake(ReadGolden("mooncake_single_event.msgpack")), want);
}

TEST(EngineWireGoldenTest, MooncakeArrayOfEventMaps) {
  EngineEventBatch want;
  want.ts = 1760000000.123;
  want.dp_rank = 0;
  want.events = {BlockRemoved{{5, 6}, "L2", 0}, AllBlocksCleared{}};
  EXPECT_EQ(DecodedMooncake(ReadGolden("mooncake_event_list.msgpack")), want);
}

TEST(EngineWireGoldenTest, EngineDecoderRejectsMooncakeShapesAndViceVersa) {
  // Each decoder is strict about its own envelope: a Mooncake batch has no
  // "type"d vLLM events, and a vLLM batch's events are not event maps.
  Result<EngineEventBatch> vllm_as_mooncake =
      DecodeMooncakeEvents(ReadGolden("vllm_legacy_positional.msgpack"));
  ASSERT_FALSE(vllm_as_mooncake.ok());
  EXPECT_EQ(vllm_as_mooncake.status().message(), "events[0]: want map, got array");
  // The master's legacy aliases make its events look like vLLM map events,
  // but a store without token ids is not a vLLM store.
  Result<EngineEventBatch> mooncake_as_vllm =
      DecodeEngineBatch(ReadGolden("mooncake_batch.msgpack"));
  ASSERT_FALSE(mooncake_as_vllm.ok());
  EXPECT_EQ(mooncake_as_vllm.status().message(), "events[0].token_ids: want array, got nil");
}

// ---------------------------------------------------------------------------
// Malformed bytes and limits.

TEST(EngineWireLimitsTest, GarbageIsMalformed) {
  for (std::string payload : {std::string("\xc1"), std::string("hello world"),
                              std::string("\x93\x01\x02"), std::string()}) {
    Result<EngineEventBatch> result = DecodeEngineBatch(payload);
    ASSERT_FALSE(result.ok()) << "payload of " << payload.size() << " bytes";
    EXPECT_EQ(result.status().code(), StatusCode::kCorruption) << result.status().ToString();
    EXPECT_EQ(DecodeErrorReason(result.status()), "malformed_msgpack");
  }
}

TEST(EngineWireLimitsTest, EveryTruncationOfEveryGoldenIsMalformed) {
  for (const char* name :
       {"vllm_legacy_positional.msgpack", "vllm_v026_map_events.msgpack",
        "vllm_map_batch_map_events.msgpack", "sglang_cpu_tier1_negative_hash.msgpack",
        "vllm_bytes_hashes.msgpack", "mooncake_batch.msgpack", "mooncake_single_event.msgpack",
        "mooncake_event_list.msgpack"}) {
    const std::string golden = ReadGolden(name);
    ASSERT_FALSE(golden.empty()) << name;
    for (size_t length = 0; length < golden.size(); ++length) {
      const std::string_view cut(golden.data(), length);
      Result<EngineEventBatch> engine = DecodeEngineBatch(cut);
      Result<EngineEventBatch> mooncake = DecodeMooncakeEvents(cut);
      ASSERT_FALSE(engine.ok()) << name << " cut at " << length;
      ASSERT_FALSE(mooncake.ok()) << name << " cut at " << length;
      EXPECT_EQ(engine.status().code(), StatusCode::kCorruption) << name << " cut at " << length;
      EXPECT_EQ(mooncake.status().code(), StatusCode::kCorruption) << name << " cut at " << length;
    }
  }
}

TEST(EngineWireLimitsTest, TrailingBytesAfterTheBatchAreMalformed) {
  Result<EngineEventBatch> result =
      DecodeEngineBatch(ReadGolden("vllm_legacy_positional.msgpack") + std::string(1, '\0'));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(result.status().message(), "payload: 1 trailing bytes after the top-level value");
}

// The child half of ExpectFailsWithinCap: caps the address space a little
// above what the process already uses, decodes, and exits 0 only when the
// decode failed with `want` without running out of memory.
[[noreturn]] void DecodeUnderCapAndExit(const std::string& payload, StatusCode want) {
  long pages = 0;
  if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%ld", &pages) != 1) pages = 0;
    std::fclose(statm);
  }
  const rlim_t cap =
      static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (rlim_t{64} << 20);
  rlimit limit;
  limit.rlim_cur = cap;
  limit.rlim_max = cap;
  if (pages == 0 || setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(3);
  Result<EngineEventBatch> result = DecodeEngineBatch(payload);
  const bool ok = !result.ok() && result.status().code() == want &&
                  result.status().message().find("out of memory") == std::string::npos;
  std::_Exit(ok ? 0 : 1);
}

// Runs the decoder in a child process with 64 MiB of address space to spare.
// An implementation that allocates what a header claims hits the cap, fails
// with "out of memory", and the child exits 1.
void ExpectFailsWithinCap(const std::string& payload, StatusCode want) {
  // Sanitizers reserve terabytes of shadow address space, which no cap can
  // accommodate; the assertions outside this helper still run there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  ::testing::Test::RecordProperty("address_space_cap", "not checked under a sanitizer");
  return;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  ::testing::Test::RecordProperty("address_space_cap", "not checked under a sanitizer");
  return;
#endif
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(DecodeUnderCapAndExit(payload, want), ::testing::ExitedWithCode(0), "");
}

TEST(EngineWireLimitsTest, Array32HeaderClaiming4GElementsFailsFastAsLimitExceeded) {
  const std::string payload("\xdd\xff\xff\xff\xff", 5);
  Result<EngineEventBatch> result = DecodeEngineBatch(payload);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(DecodeErrorReason(result.status()), "limit_exceeded");
  EXPECT_EQ(result.status().message(),
            "payload: array of 4294967295 elements exceeds max_array 1048576");
  ExpectFailsWithinCap(payload, StatusCode::kResourceExhausted);
}

TEST(EngineWireLimitsTest, InLimitHeadersClaimingMoreThanThePayloadHoldsAllocateNothing) {
  // Sixteen nested arrays, each claiming max_array (2^20) elements: a plain
  // unpack would reserve 16 x 16 MiB before noticing the bytes are missing.
  std::string payload;
  for (int i = 0; i < 16; ++i) payload += std::string("\xdd\x00\x10\x00\x00", 5);
  Result<EngineEventBatch> result = DecodeEngineBatch(payload);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kCorruption) << result.status().ToString();
  ExpectFailsWithinCap(payload, StatusCode::kCorruption);
}

TEST(EngineWireLimitsTest, DepthBombIsLimitExceeded) {
  std::string payload(100000, '\x91');  // [[[[...
  payload += '\xc0';
  Result<EngineEventBatch> result = DecodeEngineBatch(payload);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(result.status().message(), "payload: nesting deeper than max_depth 16");
  // Same for the map flavour, and for the Mooncake decoder.
  std::string maps;
  for (int i = 0; i < 1000; ++i) maps += std::string("\x81\xa1k", 3);  // {"k": {"k": ...
  maps += '\xc0';
  EXPECT_EQ(DecodeMooncakeEvents(maps).status().code(), StatusCode::kResourceExhausted);
}

TEST(EngineWireLimitsTest, DepthLimitCountsTheTopLevel) {
  // The legacy golden nests 4 deep: batch, events, event, block_hashes.
  const std::string golden = ReadGolden("vllm_legacy_positional.msgpack");
  MsgpackLimits limits;
  limits.max_depth = 4;
  EXPECT_TRUE(DecodeEngineBatch(golden, limits).ok());
  limits.max_depth = 3;
  EXPECT_EQ(DecodeEngineBatch(golden, limits).status().code(), StatusCode::kResourceExhausted);
}

TEST(EngineWireLimitsTest, EachLimitIsEnforced) {
  const std::string golden = ReadGolden("vllm_v026_map_events.msgpack");
  auto code_with = [&golden](auto tweak) {
    MsgpackLimits limits;
    tweak(limits);
    return DecodeEngineBatch(golden, limits).status().code();
  };
  EXPECT_EQ(code_with([](MsgpackLimits&) {}), StatusCode::kOk);
  EXPECT_EQ(code_with([&golden](MsgpackLimits& l) { l.max_payload_bytes = golden.size() - 1; }),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(code_with([&golden](MsgpackLimits& l) { l.max_payload_bytes = golden.size(); }),
            StatusCode::kOk);
  EXPECT_EQ(code_with([](MsgpackLimits& l) { l.max_array = 31; }),  // 32 token ids
            StatusCode::kResourceExhausted);
  EXPECT_EQ(code_with([](MsgpackLimits& l) { l.max_map = 11; }),  // 12-field event map
            StatusCode::kResourceExhausted);
  EXPECT_EQ(code_with([](MsgpackLimits& l) { l.max_str = 20; }),  // "kv_cache_spec_kind..."
            StatusCode::kResourceExhausted);
  EXPECT_EQ(code_with([](MsgpackLimits& l) { l.max_bin = 1; }),  // the 2-byte bin extra key
            StatusCode::kResourceExhausted);
  EXPECT_EQ(code_with([](MsgpackLimits& l) { l.max_bin = 2; }), StatusCode::kOk);
}

TEST(EngineWireLimitsTest, ExtIsRefusedByDefault) {
  const std::string payload =
      Pack().Array(2).Float(1).Array(1).Raw(std::string("\xd4\x01\x00", 3)).Bytes();
  Result<EngineEventBatch> result = DecodeEngineBatch(payload);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kResourceExhausted);
  // Allowed by the limit, an ext is still not an event.
  MsgpackLimits limits;
  limits.max_ext = 8;
  ExpectSchemaError(DecodeEngineBatch(payload, limits), "events[0]: want array or map, got ext");
}

// ---------------------------------------------------------------------------
// Schema errors, with the exact message.

TEST(EngineWireSchemaTest, WrongHashTypeNamesEventIndexAndField) {
  Pack p;
  p.Array(3).Float(kTs).Array(3);
  p.Array(2).Str("BlockRemoved").Ints({1});
  p.Array(1).Str("AllBlocksCleared");
  p.Array(2).Str("BlockRemoved").Array(2).Int(1).Str("oops");
  p.Nil();
  ExpectSchemaError(DecodeEngineBatch(p.Bytes()),
                    "events[2].block_hashes[1]: want int or bin, got str");
}

TEST(EngineWireSchemaTest, FieldTypeErrorsInMapEvents) {
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) {
                      p.Map(2).Str("type").Str("BlockRemoved").Str("block_hashes").Str("x");
                    })),
                    "events[0].block_hashes: want array, got str");
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) {
                      p.Map(3).Str("type").Str("BlockRemoved").Str("block_hashes").Ints({1});
                      p.Str("medium").Int(1);
                    })),
                    "events[0].medium: want str or nil, got int");
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) {
                      p.Map(3).Str("type").Str("BlockRemoved").Str("block_hashes").Ints({1});
                      p.Str("group_idx").Int(-1);
                    })),
                    "events[0].group_idx: want int >= 0, got -1");
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch(
                        [](Pack& p) { p.Array(2).Str("BlockRemoved").Array(1).Bin(""); })),
                    "events[0].block_hashes[0]: empty bin hash");
}

TEST(EngineWireSchemaTest, StoredFieldErrors) {
  auto stored = [](auto fields) {
    return DecodeEngineBatch(OneEventBatch([&fields](Pack& p) { fields(p); }));
  };
  ExpectSchemaError(
      stored([](Pack& p) {
        p.Array(5).Str("BlockStored").Ints({1}).Nil().Array(2).Int(1).Float(2.0).Int(2);
      }),
      "events[0].token_ids[1]: want int, got float");
  ExpectSchemaError(stored([](Pack& p) {
                      p.Array(5).Str("BlockStored").Ints({1}).Str("p").Ints({1, 2}).Int(2);
                    }),
                    "events[0].parent_block_hash: want int or bin, got str");
  ExpectSchemaError(
      stored([](Pack& p) { p.Array(5).Str("BlockStored").Ints({}).Nil().Ints({}).Int(0); }),
      "events[0].block_size: want int > 0, got 0");
  ExpectSchemaError(stored([](Pack& p) {
                      p.Array(4).Str("BlockStored").Ints({1}).Nil().Ints({1, 2});
                    }),
                    "events[0].block_size: missing");
  ExpectSchemaError(stored([](Pack& p) {
                      p.Map(3).Str("type").Str("BlockStored").Str("block_hashes").Ints({1});
                      p.Str("block_size").Int(2);
                    }),
                    "events[0].token_ids: missing");
  ExpectSchemaError(stored([](Pack& p) {
                      p.Array(6).Str("BlockStored").Ints({1}).Nil().Ints({1, 2}).Int(2).Str("l");
                    }),
                    "events[0].lora_id: want int or nil, got str");
  ExpectSchemaError(stored([](Pack& p) {
                      p.Array(9).Str("BlockStored").Ints({1, 2}).Nil().Ints(Tokens(0, 4)).Int(2);
                      p.Nil().Nil().Nil().Array(1).Nil();
                    }),
                    "events[0].extra_keys: want 2 entries (one per block), got 1");
  ExpectSchemaError(stored([](Pack& p) {
                      p.Array(9).Str("BlockStored").Ints({1}).Nil().Ints(Tokens(0, 2)).Int(2);
                      p.Nil().Nil().Nil().Array(1).Array(1).Float(0.5);
                    }),
                    "events[0].extra_keys[0][0]: want nil, bool, int, str, bin, array or map, "
                    "got float");
}

TEST(EngineWireSchemaTest, TokenCountMustBeBlocksTimesBlockSize) {
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) {
                      p.Array(5).Str("BlockStored").Ints({1, 2}).Nil().Ints(Tokens(0, 7)).Int(4);
                    })),
                    "events[0].token_ids: want 2 blocks x 4 tokens, got 7 tokens");
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) {
                      p.Array(5).Str("BlockStored").Ints({1, 2}).Nil().Ints(Tokens(0, 12)).Int(4);
                    })),
                    "events[0].token_ids: want 2 blocks x 4 tokens, got 12 tokens");
  EXPECT_TRUE(DecodeEngineBatch(OneEventBatch([](Pack& p) {
                p.Array(5).Str("BlockStored").Ints({1, 2}).Nil().Ints(Tokens(0, 8)).Int(4);
              })).ok());
}

TEST(EngineWireSchemaTest, BatchAndEventShapeErrors) {
  ExpectSchemaError(DecodeEngineBatch(Pack().Str("batch").Bytes()),
                    "batch: want array or map, got str");
  ExpectSchemaError(DecodeEngineBatch(Pack().Array(1).Float(1).Bytes()),
                    "batch: want [ts, events, data_parallel_rank] with at least 2 elements, got 1");
  ExpectSchemaError(DecodeEngineBatch(Pack().Array(2).Str("now").Array(0).Bytes()),
                    "ts: want float or int, got str");
  ExpectSchemaError(DecodeEngineBatch(Pack().Array(2).Float(1).Map(0).Bytes()),
                    "events: want array, got map");
  ExpectSchemaError(DecodeEngineBatch(Pack().Array(3).Float(1).Array(0).Str("0").Bytes()),
                    "data_parallel_rank: want int or nil, got str");
  ExpectSchemaError(DecodeEngineBatch(Pack().Map(1).Str("events").Array(0).Bytes()), "ts: missing");
  ExpectSchemaError(DecodeEngineBatch(Pack().Map(1).Int(1).Array(0).Bytes()),
                    "batch key: want str, got int");
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) { p.Array(0); })),
                    "events[0]: want [tag, fields...], got []");
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) { p.Array(1).Int(5); })),
                    "events[0].type: want str, got int");
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) { p.Map(0); })),
                    "events[0].type: missing");
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) { p.Str("BlockStored"); })),
                    "events[0]: want array or map, got str");
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) {
                      p.Map(3).Str("type").Str("BlockRemoved").Str("block_hashes").Ints({1});
                      p.Str("block_hashes").Ints({2});
                    })),
                    "events[0].block_hashes: duplicate key");
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) {
                      p.Map(2).Str("type").Str("AllBlocksCleared").Str("type").Str("BlockRemoved");
                    })),
                    "events[0].type: duplicate key");
}

// Found by fuzz/engine_batch_fuzzer (fuzz/corpus/engine_batch_fuzzer/
// regression_nan_ts.msgpack): a NaN or infinite timestamp decoded, and
// would then have broken the stream's redelivery-or-restart test, which
// compares timestamps.
TEST(EngineWireSchemaTest, NonFiniteTimestampsAreRejected) {
  const std::string fuzzer_input("\x92\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00\x90", 11);
  ExpectSchemaError(DecodeEngineBatch(fuzzer_input), "ts: want a finite number, got nan");
  const double inf = std::numeric_limits<double>::infinity();
  ExpectSchemaError(DecodeEngineBatch(Pack().Array(2).Float(inf).Array(0).Bytes()),
                    "ts: want a finite number, got inf");
  ExpectSchemaError(
      DecodeEngineBatch(Pack().Map(2).Str("ts").Float(-inf).Str("events").Array(0).Bytes()),
      "ts: want a finite number, got -inf");
  // A float32 NaN, which msgpack-cxx widens to a double NaN.
  ExpectSchemaError(DecodeEngineBatch(std::string("\x92\xca\x7f\xc0\x00\x00\x90", 7)),
                    "ts: want a finite number, got nan");

  ExpectSchemaError(DecodeMooncakeEvents(Pack().Array(2).Float(inf).Array(0).Bytes()),
                    "timestamp_ms: want a finite number, got inf");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ExpectSchemaError(
      DecodeMooncakeEvents(
          Pack().Map(2).Str("event_type").Str("cleared").Str("timestamp").Float(nan).Bytes()),
      "events[0].timestamp: want a finite number, got nan");
  // The largest finite values still decode: only NaN and infinities are refused.
  EXPECT_EQ(Decoded(Pack().Array(2).Float(std::numeric_limits<double>::max()).Array(0).Bytes()).ts,
            std::numeric_limits<double>::max());
}

TEST(EngineWireSchemaTest, HugeUnsignedTokenIdIsOutOfRange) {
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) {
                      p.Array(5).Str("BlockStored").Ints({1}).Nil().Array(1).UInt(1ull << 63);
                      p.Int(1);
                    })),
                    "events[0].token_ids[0]: want a token id in 0..2147483647, got "
                    "9223372036854775808");
}

// vLLM's token ids are non-negative int32; anything else is a misaligned or
// forged event, refused naming the element.
TEST(EngineWireSchemaTest, TokenIdsOutsideInt32AreRefusedNamingTheElement) {
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) {
                      p.Array(5).Str("BlockStored").Ints({1}).Nil().Ints({7, -1}).Int(2);
                    })),
                    "events[0].token_ids[1]: want a token id in 0..2147483647, got -1");
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) {
                      p.Array(5).Str("BlockStored").Ints({1}).Nil().Ints({2147483648}).Int(1);
                    })),
                    "events[0].token_ids[0]: want a token id in 0..2147483647, got 2147483648");
  Result<EngineEventBatch> at_limit = DecodeEngineBatch(OneEventBatch([](Pack& p) {
    p.Array(5).Str("BlockStored").Ints({1}).Nil().Ints({0, 2147483647}).Int(2);
  }));
  ASSERT_TRUE(at_limit.ok()) << at_limit.status().ToString();
}

// SGLang's EAGLE mode publishes each position as [token, next token].
TEST(EngineWireSglangTest, EagleBigramTokenIdsKeyByTheirFirstToken) {
  Result<EngineEventBatch> got = DecodeEngineBatch(OneEventBatch([](Pack& p) {
    p.Map(5).Str("type").Str("BlockStored").Str("block_hashes").Ints({1, 2});
    p.Str("parent_block_hash").Nil().Str("block_size").Int(2).Str("token_ids").Array(4);
    for (int64_t t : {10, 11, 12, 13}) p.Array(2).Int(t).Int(t + 1);
  }));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(std::get<BlockStored>(got->events.at(0)).token_ids,
            (std::vector<int64_t>{10, 11, 12, 13}));
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) {
                      p.Array(5).Str("BlockStored").Ints({1}).Nil().Array(2);
                      p.Array(2).Int(1).Int(2).Int(3);
                      p.Int(2);
                    })),
                    "events[0].token_ids[1]: want [token, next token] like element 0, got int");
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) {
                      p.Array(5).Str("BlockStored").Ints({1}).Nil().Array(1);
                      p.Array(2).Int(1).Int(-2);
                      p.Int(1);
                    })),
                    "events[0].token_ids[0][1]: want a token id in 0..2147483647, got -2");
}

// SGLang reports the salt beside the hashes; it must key the chain's first
// block exactly as kvgov's own salted route keys do (FirstBlockExtraKey).
TEST(EngineWireSglangTest, ReportedCacheSaltEntersTheFirstBlocksExtraKey) {
  // Map events (sglang#37482): cache_salt and session_id by name.
  Result<EngineEventBatch> map = DecodeEngineBatch(OneEventBatch([](Pack& p) {
    p.Map(8).Str("type").Str("BlockStored").Str("block_hashes").Ints({1, 2});
    p.Str("parent_block_hash").Nil().Str("token_ids").Ints({1, 2, 3, 4}).Str("block_size").Int(2);
    p.Str("medium").Str("GPU").Str("cache_salt").Str("tenant-salt").Str("session_id").Str("s-9");
  }));
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(map->ignored.unknown_fields, 0u);
  EXPECT_EQ(std::get<BlockStored>(map->events.at(0)).extra_keys,
            (std::vector<std::string>{FirstBlockExtraKey("", "tenant-salt"), ""}));
  // Positional (sglang#30827): a {"cache_salt"} map where vLLM has lora_name.
  Result<EngineEventBatch> positional = DecodeEngineBatch(OneEventBatch([](Pack& p) {
    p.Array(8).Str("BlockStored").Ints({1}).Nil().Ints({1, 2}).Int(2).Nil().Str("CPU_PINNED");
    p.Map(1).Str("cache_salt").Str("tenant-salt");
  }));
  ASSERT_TRUE(positional.ok()) << positional.status().ToString();
  const auto& stored = std::get<BlockStored>(positional->events.at(0));
  EXPECT_EQ(stored.extra_keys, (std::vector<std::string>{R"(["tenant-salt"])"}));
  EXPECT_EQ(stored.lora_name, "");
  EXPECT_EQ(TierForMedium(stored.medium), ResidencyTier::kDRAM);
  // A continuation's salt is already in its parent's key: no extra key.
  Result<EngineEventBatch> child = DecodeEngineBatch(OneEventBatch([](Pack& p) {
    p.Map(6).Str("type").Str("BlockStored").Str("block_hashes").Ints({3});
    p.Str("parent_block_hash").Int(2).Str("token_ids").Ints({5, 6}).Str("block_size").Int(2);
    p.Str("cache_salt").Str("tenant-salt");
  }));
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  EXPECT_TRUE(std::get<BlockStored>(child->events.at(0)).extra_keys.empty());
  // An engine's own extra_keys win over a salt reported beside them.
  Result<EngineEventBatch> both = DecodeEngineBatch(OneEventBatch([](Pack& p) {
    p.Map(7).Str("type").Str("BlockStored").Str("block_hashes").Ints({1});
    p.Str("parent_block_hash").Nil().Str("token_ids").Ints({5, 6}).Str("block_size").Int(2);
    p.Str("extra_keys").Array(1).Array(1).Str("engine-salt").Str("cache_salt").Str("other");
  }));
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_EQ(std::get<BlockStored>(both->events.at(0)).extra_keys,
            (std::vector<std::string>{R"(["engine-salt"])"}));
}

TEST(EngineWireSglangTest, MapBatchAttnDpRankIsTheRank) {
  Pack p;
  p.Map(3).Str("ts").Float(3).Str("events").Array(0).Str("attn_dp_rank").Int(1);
  Result<EngineEventBatch> got = DecodeEngineBatch(p.Bytes());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->dp_rank, 1);
  EXPECT_EQ(got->ignored.unknown_fields, 0u);
}

// vLLM 0.26's storage tiers (vllm#47923, #48281): locality on stored and
// removed events, ownership and session_id read and dropped.
TEST(EngineWireVllmTest, LocalityOwnershipAndSessionAreDecoded) {
  Result<EngineEventBatch> got = DecodeEngineBatch(OneEventBatch([](Pack& p) {
    p.Array(15).Str("BlockStored").Ints({1}).Nil().Ints({1, 2}).Int(2).Nil().Str("FS").Nil();
    p.Nil().Int(0).Str("full_attention").Nil().Str("REMOTE").Str("shared").Str("sess-1");
  }));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const auto& stored = std::get<BlockStored>(got->events.at(0));
  EXPECT_EQ(stored.locality, "REMOTE");
  EXPECT_EQ(got->ignored.unknown_fields, 0u);
  EXPECT_EQ(TierForMedium(stored.medium, stored.locality), ResidencyTier::kRemote);
  Result<EngineEventBatch> removed = DecodeEngineBatch(OneEventBatch([](Pack& p) {
    p.Map(5).Str("type").Str("BlockRemoved").Str("block_hashes").Ints({1});
    p.Str("medium").Str("OBJ").Str("locality").Str("LOCAL").Str("ownership").Nil();
  }));
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(std::get<BlockRemoved>(removed->events.at(0)), (BlockRemoved{{1}, "OBJ", 0, "LOCAL"}));
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch([](Pack& p) {
                      p.Map(3).Str("type").Str("BlockRemoved").Str("block_hashes").Ints({1});
                      p.Str("locality").Int(1);
                    })),
                    "events[0].locality: want str or nil, got int");
}

// ---------------------------------------------------------------------------
// Tolerance: unknown fields and event types are skipped and counted.

TEST(EngineWireToleranceTest, UnknownEventTypesAreSkippedAndCounted) {
  Pack p;
  p.Array(3).Float(2).Array(4);
  p.Array(3).Str("BlockPinned").Int(1).Int(2);
  p.Map(2).Str("type").Str("KVCacheReset").Str("why").Str("because");
  p.Array(2).Str("BlockRemoved").Ints({9});
  p.Array(1).Str("blockstored");  // tags are case-sensitive
  p.Int(1);
  EngineEventBatch want;
  want.ts = 2;
  want.dp_rank = 1;
  want.events = {BlockRemoved{{9}, "", 0}};
  want.ignored.unknown_event_types = 3;
  EXPECT_EQ(Decoded(p.Bytes()), want);
}

TEST(EngineWireToleranceTest, UnknownFieldsAreCountedAtBothLevels) {
  Pack p;
  p.Array(5).Float(2).Array(2);  // 2 extra batch elements
  p.Array(8)
      .Str("BlockRemoved")
      .Ints({9})
      .Str("GPU")
      .Int(4)  // block_hashes, medium, group_idx
      .Str("LOCAL")
      .Nil()  // locality, ownership
      .Str("reason")
      .Nil();  // 2 extra positional fields
  p.Map(4).Str("type").Str("AllBlocksCleared").Str("scope").Str("all").Str("epoch").Int(3);
  p.Str("cache_salt").Str("not-unknown-on-clear");  // known only on BlockStored
  p.Nil().Str("future").Map(0);
  EngineEventBatch want;
  want.ts = 2;
  want.events = {BlockRemoved{{9}, "GPU", 4, "LOCAL"}, AllBlocksCleared{}};
  want.ignored.unknown_fields = 2 + 2 + 3;
  EXPECT_EQ(Decoded(p.Bytes()), want);
}

TEST(EngineWireToleranceTest, MapBatchUnknownKeysAreCounted) {
  Pack p;
  p.Map(4)
      .Str("events")
      .Array(0)
      .Str("ts")
      .Int(7)
      .Str("producer")
      .Str("x")
      .Str("data_parallel_rank")
      .Nil();
  EngineEventBatch want;
  want.ts = 7;
  want.ignored.unknown_fields = 1;
  EXPECT_EQ(Decoded(p.Bytes()), want);
}

// ---------------------------------------------------------------------------
// Hash normalisation and extra-key canonical JSON.

TEST(EngineWireValuesTest, HashNormalisation) {
  struct Case {
    std::string name;
    std::string packed;
    EngineHash want;
  };
  const std::vector<Case> cases = {
      {"zero", Pack().Int(0).Bytes(), 0},
      {"u64 max", Pack().UInt(~0ull).Bytes(), ~0ull},
      {"above int64", Pack().UInt(1ull << 63).Bytes(), 1ull << 63},
      {"minus one", Pack().Int(-1).Bytes(), ~0ull},
      {"int64 min", Pack().Int(INT64_MIN).Bytes(), 1ull << 63},
      {"bin 1 byte", Pack().Bin("\x7f").Bytes(), 0x7f},
      {"bin 8 bytes", Pack().Bin("\x01\x02\x03\x04\x05\x06\x07\x08").Bytes(), 0x0102030405060708},
      {"bin 9 bytes", Pack().Bin("\xff\x01\x02\x03\x04\x05\x06\x07\x08").Bytes(),
       0x0102030405060708},
  };
  for (const Case& c : cases) {
    const std::string payload = Pack()
                                    .Array(2)
                                    .Float(0)
                                    .Array(1)
                                    .Array(2)
                                    .Str("BlockRemoved")
                                    .Array(1)
                                    .Raw(c.packed)
                                    .Bytes();
    EngineEventBatch batch = Decoded(payload);
    ASSERT_EQ(batch.events.size(), 1u) << c.name;
    EXPECT_EQ(std::get<BlockRemoved>(batch.events[0]).block_hashes, std::vector<EngineHash>{c.want})
        << c.name;
  }
}

std::vector<std::string> ExtraKeysOf(const std::string& packed_key) {
  const std::string payload = OneEventBatch([&packed_key](Pack& p) {
    p.Array(9).Str("BlockStored").Ints({1}).Nil().Ints({1}).Int(1).Nil().Nil().Nil();
    p.Array(1).Raw(packed_key);
  });
  EngineEventBatch batch = Decoded(payload);
  if (batch.events.size() != 1) return {};
  return std::get<BlockStored>(batch.events[0]).extra_keys;
}

TEST(EngineWireValuesTest, ExtraKeysCanonicalJson) {
  EXPECT_EQ(ExtraKeysOf(Pack().Nil().Bytes()), std::vector<std::string>{""});
  EXPECT_EQ(ExtraKeysOf(Pack().Array(1).Str("s1").Bytes()), std::vector<std::string>{R"(["s1"])"});
  EXPECT_EQ(ExtraKeysOf(Pack().Array(1).Nil().Bytes()), std::vector<std::string>{"[null]"});
  EXPECT_EQ(ExtraKeysOf(Pack().Str("bare").Bytes()), std::vector<std::string>{R"("bare")"});
  // Maps: keys sorted by bytes, whatever order they were sent in.
  EXPECT_EQ(ExtraKeysOf(Pack()
                            .Map(3)
                            .Str("b")
                            .Int(1)
                            .Str("a")
                            .Array(2)
                            .Nil()
                            .Bool(false)
                            .Str("B")
                            .Bin(std::string("\x00\xff", 2))
                            .Bytes()),
            std::vector<std::string>{R"({"B":{"bin":"00ff"},"a":[null,false],"b":1})"});
  // Escaping: quote, backslash, short escapes, other controls as \u00xx,
  // UTF-8 passed through.
  EXPECT_EQ(ExtraKeysOf(Pack().Str("q\"\\\n\t\x01\x7f\xc3\xa9").Bytes()),
            std::vector<std::string>{"\"q\\\"\\\\\\n\\t\\u0001\x7f\xc3\xa9\""});
  EXPECT_EQ(ExtraKeysOf(Pack().Array(2).Int(-7).UInt(~0ull).Bytes()),
            std::vector<std::string>{"[-7,18446744073709551615]"});
}

TEST(EngineWireValuesTest, ExtraKeysWithoutACanonicalFormAreRejected) {
  auto error_for = [](const std::string& packed_key) {
    const std::string payload = OneEventBatch([&packed_key](Pack& p) {
      p.Array(9).Str("BlockStored").Ints({1}).Nil().Ints({1}).Int(1).Nil().Nil().Nil();
      p.Array(1).Raw(packed_key);
    });
    return DecodeEngineBatch(payload).status().message();
  };
  EXPECT_EQ(error_for(Pack().Str("\xc3").Bytes()), "events[0].extra_keys[0]: invalid UTF-8");
  EXPECT_EQ(error_for(Pack().Str("\xed\xa0\x80").Bytes()),  // a UTF-16 surrogate
            "events[0].extra_keys[0]: invalid UTF-8");
  EXPECT_EQ(error_for(Pack().Str("\xc0\xaf").Bytes()),  // overlong '/'
            "events[0].extra_keys[0]: invalid UTF-8");
  EXPECT_EQ(error_for(Pack().Map(1).Int(1).Int(2).Bytes()),
            "events[0].extra_keys[0] key: want str, got int");
  EXPECT_EQ(error_for(Pack().Map(2).Str("a").Int(1).Str("a").Int(2).Bytes()),
            "events[0].extra_keys[0].a: duplicate key");
  EXPECT_EQ(error_for(Pack().Map(1).Str("a").Array(1).Float(1).Bytes()),
            "events[0].extra_keys[0].a[0]: want nil, bool, int, str, bin, array or map, got float");
}

TEST(EngineWireValuesTest, StringFieldsMustBeUtf8) {
  ExpectSchemaError(DecodeEngineBatch(OneEventBatch(
                        [](Pack& p) { p.Array(3).Str("BlockRemoved").Ints({1}).Str("G\xffU"); })),
                    "events[0].medium: invalid UTF-8");
}

// ---------------------------------------------------------------------------
// Mooncake specifics.

// A Mooncake event map; `extra` packs `extra_pairs` more key/value pairs.
template <typename ExtraFn>
std::string MooncakeEvent(const char* event_type, uint32_t extra_pairs, ExtraFn extra) {
  Pack p;
  p.Map(2 + extra_pairs).Str("event_type").Str(event_type).Str("timestamp").Int(2500);
  extra(p);
  return p.Bytes();
}

TEST(MooncakeWireTest, EventTypeAndLegacyTypeMustAgree) {
  const std::string payload = MooncakeEvent(
      "stored", 2, [](Pack& p) { p.Str("type").Str("BlockRemoved").Str("seq_hashes").Ints({1}); });
  ExpectSchemaError(DecodeMooncakeEvents(payload),
                    "events[0].type: 'BlockRemoved' disagrees with event_type 'stored'");
}

TEST(MooncakeWireTest, LegacyAliasesAloneAreEnough) {
  Pack p;
  p.Map(3).Str("type").Str("BlockRemoved").Str("block_hashes").Ints({-2}).Str("medium").Str("disk");
  EngineEventBatch want;
  want.events = {BlockRemoved{{0xFFFFFFFFFFFFFFFEull}, "disk", 0}};
  EXPECT_EQ(DecodedMooncake(p.Bytes()), want);
}

TEST(MooncakeWireTest, SeqHashesAndBlockHashesMustAgree) {
  const std::string payload = MooncakeEvent("removed", 2, [](Pack& p) {
    p.Str("seq_hashes").Ints({1, 2}).Str("block_hashes").Ints({1, 3});
  });
  ExpectSchemaError(DecodeMooncakeEvents(payload),
                    "events[0].block_hashes: disagrees with seq_hashes");
  const std::string parents = MooncakeEvent("stored", 3, [](Pack& p) {
    p.Str("seq_hashes").Ints({1}).Str("parent_hash").Int(5).Str("parent_block_hash").Int(6);
  });
  ExpectSchemaError(DecodeMooncakeEvents(parents),
                    "events[0].parent_block_hash: disagrees with parent_hash");
}

TEST(MooncakeWireTest, UnknownEventTypeAndFieldsAreCounted) {
  Pack p;
  p.Array(3).Int(4000).Array(2);
  p.Map(2).Str("event_type").Str("updated").Str("seq_hashes").Ints({1});
  p.Map(4).Str("event_type").Str("cleared").Str("tenant_id").Str("t").Str("object_key").Str("k");
  p.Str("surprise").Int(1);
  p.Nil();
  EngineEventBatch want;
  want.ts = 4.0;
  want.events = {AllBlocksCleared{}};
  want.ignored.unknown_event_types = 1;
  want.ignored.unknown_fields = 1;  // "surprise"; object_key is a known Mooncake field
  EXPECT_EQ(DecodedMooncake(p.Bytes()), want);
}

TEST(MooncakeWireTest, StoredWithTokensChecksThemAgainstBlockSize) {
  const std::string ok = MooncakeEvent("stored", 4, [](Pack& p) {
    p.Str("seq_hashes").Ints({1, 2}).Str("block_size").Int(2).Str("token_ids").Ints(Tokens(0, 4));
    p.Str("tenant_id").Str("t\"1");
  });
  EngineEventBatch want;
  want.ts = 2.5;
  BlockStored stored;
  stored.block_hashes = {1, 2};
  stored.token_ids = Tokens(0, 4);
  stored.block_size = 2;
  stored.extra_keys = {R"(["mooncake","t\"1",null])", ""};
  want.events = {stored};
  EXPECT_EQ(DecodedMooncake(ok), want);

  const std::string short_tokens = MooncakeEvent("stored", 3, [](Pack& p) {
    p.Str("seq_hashes").Ints({1, 2}).Str("block_size").Int(2).Str("token_ids").Ints(Tokens(0, 3));
  });
  ExpectSchemaError(DecodeMooncakeEvents(short_tokens),
                    "events[0].token_ids: want 2 blocks x 2 tokens, got 3 tokens");
  const std::string no_block_size = MooncakeEvent("stored", 2, [](Pack& p) {
    p.Str("seq_hashes").Ints({1}).Str("token_ids").Ints(Tokens(0, 3));
  });
  ExpectSchemaError(DecodeMooncakeEvents(no_block_size),
                    "events[0].token_ids: sent without a block_size to check them against");
}

TEST(MooncakeWireTest, TenantsNeverShareAFirstBlockKey) {
  auto first_key = [](const char* tenant, const char* salt) {
    const std::string payload = MooncakeEvent("stored", 3, [&](Pack& p) {
      p.Str("seq_hashes").Ints({77});
      p.Str("tenant_id");
      tenant != nullptr ? p.Str(tenant) : p.Nil();
      p.Str("additional_salt");
      salt != nullptr ? p.Str(salt) : p.Nil();
    });
    EngineEventBatch batch = DecodedMooncake(payload);
    return batch.events.empty() ? std::string()
                                : std::get<BlockStored>(batch.events[0]).extra_keys.at(0);
  };
  EXPECT_EQ(first_key("a", nullptr), R"(["mooncake","a",null])");
  EXPECT_EQ(first_key(nullptr, nullptr), R"(["mooncake",null,null])");
  EXPECT_EQ(first_key("", nullptr), R"(["mooncake","",null])");
  EXPECT_EQ(first_key("a", "s"), R"(["mooncake","a","s"])");
  EXPECT_NE(first_key("a", nullptr), first_key("b", nullptr));
  EXPECT_NE(first_key("a,b", nullptr), first_key("a", "b"));
}

TEST(MooncakeWireTest, GroupIdParsing) {
  auto group_of = [](auto pack_group) {
    const std::string payload = MooncakeEvent("removed", 2, [&](Pack& p) {
      p.Str("seq_hashes").Ints({1}).Str("group_id");
      pack_group(p);
    });
    EngineEventBatch batch = DecodedMooncake(payload);
    return batch.events.empty() ? int64_t{-1} : std::get<BlockRemoved>(batch.events[0]).group_idx;
  };
  EXPECT_EQ(group_of([](Pack& p) { p.Str("group:3"); }), 3);
  EXPECT_EQ(group_of([](Pack& p) { p.Str("12"); }), 12);
  EXPECT_EQ(group_of([](Pack& p) { p.Int(5); }), 5);
  EXPECT_EQ(group_of([](Pack& p) { p.Nil(); }), 0);
  EXPECT_EQ(group_of([](Pack& p) { p.Str("batch-7"); }), 0);  // a Store group, not a KV group
  ExpectSchemaError(
      DecodeMooncakeEvents(MooncakeEvent(
          "removed", 2, [](Pack& p) { p.Str("seq_hashes").Ints({1}).Str("group_id").Float(1); })),
      "events[0].group_id: want int >= 0, str or nil, got float");
}

TEST(MooncakeWireTest, ShapeErrors) {
  ExpectSchemaError(DecodeMooncakeEvents(MooncakeEvent("stored", 0, [](Pack&) {})),
                    "events[0].seq_hashes: missing");
  ExpectSchemaError(DecodeMooncakeEvents(Pack().Map(1).Str("seq_hashes").Ints({1}).Bytes()),
                    "events[0].event_type: missing");
  ExpectSchemaError(DecodeMooncakeEvents(Pack().Map(1).Str("event_type").Int(1).Bytes()),
                    "events[0].event_type: want str, got int");
  ExpectSchemaError(DecodeMooncakeEvents(Pack().Array(3).Int(1).Map(0).Int(0).Bytes()),
                    "events: want array, got map");
  ExpectSchemaError(
      DecodeMooncakeEvents(Pack().Array(2).Str("x").Array(0).Bytes()),
      "batch: want [timestamp_ms, [event maps], dp_rank], an event map or an array of "
      "event maps; got an array starting with str of 2 element(s)");
  ExpectSchemaError(
      DecodeMooncakeEvents(Pack().Array(2).Map(1).Str("event_type").Str("cleared").Int(3).Bytes()),
      "events[1]: want map, got int");
  ExpectSchemaError(DecodeMooncakeEvents(Pack().Str("x").Bytes()),
                    "batch: want array or map, got str");
  EXPECT_EQ(DecodedMooncake(Pack().Array(0).Bytes()), EngineEventBatch{});
}

// ---------------------------------------------------------------------------
// The one pass (docs/adr/0025) against the object path.

// Whatever the one pass returns, the object path returns too.
void ExpectOnePassSound(const std::string& payload, const std::string& what) {
  const std::optional<EngineEventBatch> fast = internal::DecodeEngineBatchInOnePass(payload, {});
  if (!fast.has_value()) return;
  const Result<EngineEventBatch> objects = internal::DecodeEngineBatchByObjects(payload, {});
  ASSERT_TRUE(objects.ok()) << what << ": the one pass took a payload the object path refuses: "
                            << objects.status().ToString();
  EXPECT_EQ(*fast, *objects) << what;
}

TEST(OnePassDecoderTest, TakesEveryEnginesGoldenButEagleBigrams) {
  for (const char* name : {"vllm_legacy_positional.msgpack", "vllm_v026_map_events.msgpack",
                           "vllm_storage_locality.msgpack", "vllm_map_batch_map_events.msgpack",
                           "sglang_cpu_tier1_negative_hash.msgpack", "vllm_bytes_hashes.msgpack"}) {
    const std::string payload = ReadGolden(name);
    const std::optional<EngineEventBatch> fast = internal::DecodeEngineBatchInOnePass(payload, {});
    ASSERT_TRUE(fast.has_value()) << name;
    EXPECT_EQ(*fast, Decoded(payload)) << name;
    ExpectOnePassSound(payload, name);
  }
  // SGLang's EAGLE bigrams are rare: the object path reads them.
  const std::string eagle = ReadGolden("sglang_salted_eagle.msgpack");
  EXPECT_FALSE(internal::DecodeEngineBatchInOnePass(eagle, {}).has_value());
  EXPECT_TRUE(DecodeEngineBatch(eagle).ok());
}

// Salts by name, nested extra keys, unknown fields at every level, an
// unknown event type, a tag after its fields, signed and wide encodings.
TEST(OnePassDecoderTest, TakesEveryCommonFormTheSameAsTheObjectPath) {
  Pack p;
  p.Map(5).Str("events").Array(5);
  p.Map(9).Str("block_hashes").Ints({1, 2}).Str("parent_block_hash").Nil();
  p.Str("token_ids").Array(4).UInt(1).UInt(300).UInt(70000).Raw(std::string("\xd0\x05", 2));
  p.Str("block_size").Int(2).Str("cache_salt").Str("tenant-salt").Str("lora_name").Str("ad");
  p.Str("medium").Str("CPU").Str("future").Map(1).Str("x").Array(2).Nil().Float(1.5);
  p.Str("type").Str("BlockStored");
  p.Array(9).Str("BlockStored").Array(1).Bin("abcdefghij").Int(-5).Ints({7, 8}).Int(2).Int(3);
  p.Str("GPU").Nil().Array(1).Array(3).Str("mm").Int(-1).Bin(std::string("\x00\x01", 2));
  p.Map(3).Str("type").Str("BlockRemoved").Str("block_hashes").Ints({1}).Str("token_ids").Ints({});
  p.Array(2).Str("SomethingNew").Map(1).Str("k").Str("v");
  p.Array(1).Str("AllBlocksCleared");
  p.Str("ts").Float(kTs).Str("data_parallel_rank").Int(2).Str("attn_dp_rank").Int(9);
  p.Str("producer").Array(0);
  const std::string payload = p.Bytes();
  const std::optional<EngineEventBatch> fast = internal::DecodeEngineBatchInOnePass(payload, {});
  ASSERT_TRUE(fast.has_value());
  const EngineEventBatch objects = Decoded(payload);
  EXPECT_EQ(*fast, objects);
  EXPECT_EQ(objects.events.size(), 4u);
  EXPECT_EQ(objects.ignored.unknown_event_types, 1u);
  EXPECT_EQ(objects.ignored.unknown_fields, 3u);  // future, removed's token_ids, producer
  EXPECT_EQ(objects.dp_rank, 2);
}

// Errors, limits and rare forms are the object path's: the one pass
// declines them and the caller sees the object path's own answer.
TEST(OnePassDecoderTest, LeavesErrorsLimitsAndRareFormsToTheObjectPath) {
  const std::string bad_hash = OneEventBatch([](Pack& p) {
    p.Array(5).Str("BlockStored").Array(1).Str("h").Nil().Ints({1, 2}).Int(2);
  });
  EXPECT_FALSE(internal::DecodeEngineBatchInOnePass(bad_hash, {}).has_value());
  ExpectSchemaError(DecodeEngineBatch(bad_hash),
                    "events[0].block_hashes[0]: want int or bin, got str");

  MsgpackLimits tight;
  tight.max_str = 4;
  const std::string long_unknown =
      OneEventBatch([](Pack& p) { p.Array(2).Str("Future").Str("longer than four"); });
  EXPECT_FALSE(internal::DecodeEngineBatchInOnePass(long_unknown, tight).has_value());
  EXPECT_EQ(DecodeEngineBatch(long_unknown, tight).status().code(), StatusCode::kResourceExhausted);

  // An empty extra-keys array for two blocks is refused, not taken as none.
  const std::string no_keys = OneEventBatch([](Pack& p) {
    p.Map(5).Str("type").Str("BlockStored").Str("block_hashes").Ints({1, 2});
    p.Str("token_ids").Ints({1, 2, 3, 4}).Str("block_size").Int(2).Str("extra_keys").Array(0);
  });
  EXPECT_FALSE(internal::DecodeEngineBatchInOnePass(no_keys, {}).has_value());
  EXPECT_FALSE(DecodeEngineBatch(no_keys).ok());
}

// The differential check of the fuzzer (fuzz/engine_batch_differential_fuzzer.cc),
// here over deterministic mutations of every golden so `make test` runs it.
TEST(OnePassDecoderTest, AgreesWithTheObjectPathOnMutatedGoldens) {
  std::mt19937_64 random(25);
  size_t taken = 0;
  for (const char* name : {"vllm_legacy_positional.msgpack", "vllm_v026_map_events.msgpack",
                           "vllm_storage_locality.msgpack", "sglang_salted_eagle.msgpack",
                           "vllm_map_batch_map_events.msgpack",
                           "sglang_cpu_tier1_negative_hash.msgpack", "vllm_bytes_hashes.msgpack"}) {
    const std::string golden = ReadGolden(name);
    for (int round = 0; round < 3000; ++round) {
      std::string payload = golden;
      for (int edits = 1 + static_cast<int>(random() % 3); edits > 0 && !payload.empty(); --edits) {
        const size_t at = random() % payload.size();
        switch (random() % 4) {
          case 0:
            payload[at] = static_cast<char>(random());
            break;
          case 1:
            payload[at] = static_cast<char>(payload[at] ^ (1 << (random() % 8)));
            break;
          case 2:
            payload.erase(at, 1);
            break;
          default:
            payload.insert(at, 1, static_cast<char>(random()));
            break;
        }
      }
      ExpectOnePassSound(payload, std::string(name) + " round " + std::to_string(round));
      if (internal::DecodeEngineBatchInOnePass(payload, {}).has_value()) ++taken;
    }
  }
  // Not vacuous: many mutants are still batches the one pass reads.
  EXPECT_GT(taken, 1000u);
}

// Issue 19's ingest check: one stream, applied once as the one pass decodes
// it and once as the object path does, leaves the same index. The stream
// has what engines send: chains with parents, salts, LoRA extra keys,
// offloads to host memory, evictions and a reset, in both encodings.
TEST(OnePassDecoderTest, AStreamLeavesTheSameIndexEitherWay) {
  std::mt19937_64 random(7);
  index::ResidencyIndex by_one_pass;
  index::ResidencyIndex by_objects;
  ASSERT_TRUE(by_one_pass.AddWorker("w", "llama", 4).ok());
  ASSERT_TRUE(by_objects.AddWorker("w", "llama", 4).ok());
  std::vector<std::vector<EngineHash>> chains;
  size_t one_pass_batches = 0;
  for (int step = 0; step < 300; ++step) {
    EngineEventBatch batch;
    batch.ts = 1.79e9 + step;
    for (int i = 0; i < 3; ++i) {
      BlockStored stored;
      stored.block_size = 4;
      stored.medium = step % 5 == 0 ? "CPU" : "GPU";
      if (i > 0 && !chains.empty()) stored.parent_block_hash = chains.back().back();
      const int blocks = 1 + static_cast<int>(random() % 4);
      for (int b = 0; b < blocks; ++b) {
        stored.block_hashes.push_back(random());
        for (int t = 0; t < 4; ++t)
          stored.token_ids.push_back(static_cast<int64_t>(random() % 128256));
      }
      if (step % 7 == 0) {
        stored.lora_name = "adapter";
        stored.extra_keys.assign(stored.block_hashes.size(), R"(["adapter"])");
        if (!stored.parent_block_hash) stored.extra_keys[0] = R"(["adapter","salt-a"])";
      }
      chains.push_back(stored.block_hashes);
      batch.events.emplace_back(std::move(stored));
    }
    if (step % 3 == 0 && chains.size() > 6) {
      batch.events.emplace_back(BlockRemoved{chains[chains.size() - 6], "GPU", 0, ""});
    }
    if (step == 150) batch.events.emplace_back(AllBlocksCleared{});
    const auto encoding =
        step % 2 == 0 ? sim::WireEncoding::kMap : sim::WireEncoding::kLegacyPositional;
    Result<std::string> payload = sim::EncodeEventBatch(batch, encoding);
    ASSERT_TRUE(payload.ok()) << payload.status().ToString();
    const std::optional<EngineEventBatch> fast = internal::DecodeEngineBatchInOnePass(*payload, {});
    if (fast.has_value()) ++one_pass_batches;
    const Result<EngineEventBatch> objects = internal::DecodeEngineBatchByObjects(*payload, {});
    ASSERT_TRUE(objects.ok()) << objects.status().ToString();
    for (const EngineEvent& event : fast.has_value() ? fast->events : objects->events) {
      ASSERT_TRUE(by_one_pass.Apply("w", event).ok());
    }
    for (const EngineEvent& event : objects->events) ASSERT_TRUE(by_objects.Apply("w", event).ok());
  }
  EXPECT_EQ(one_pass_batches, 300u);  // every batch went the one pass
  EXPECT_GT(by_objects.ResidentPairs(), 0u);
  EXPECT_EQ(by_one_pass.ResidentPairs(), by_objects.ResidentPairs());
  const Result<std::string> a = by_one_pass.SnapshotWorker("w");
  const Result<std::string> b = by_objects.SnapshotWorker("w");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(DecodeErrorReasonTest, IsABoundedLabel) {
  EXPECT_EQ(DecodeErrorReason(Status::ResourceExhausted("x")), "limit_exceeded");
  EXPECT_EQ(DecodeErrorReason(Status::Corruption("x")), "malformed_msgpack");
  EXPECT_EQ(DecodeErrorReason(Status::InvalidArgument("x")), "bad_schema");
  EXPECT_EQ(DecodeErrorReason(Status::Internal("x")), "bad_schema");
}

}  // namespace
}  // namespace kvgov::adapters
