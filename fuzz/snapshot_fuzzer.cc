// replication::DecodeSnapshot: the governance snapshot a replica installs
// after a long absence, read from Redis, where any client with access could
// have written it (the manifest's SHA-256 only proves the chunks are whole).
// Checked, beyond no crash, leak or exception:
//  - a refusal is InvalidArgument, and every input over kMaxSnapshotBytes
//    is refused;
//  - a decoded snapshot has a stream id and round-trips: encoding it and
//    decoding that gives the same snapshot.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "kvgov/replication/governance_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgov;
  using namespace kvgov::fuzz;
  const std::string_view bytes = AsText(data, size);

  const Result<replication::GovernanceSnapshot> snapshot = replication::DecodeSnapshot(bytes);
  if (!snapshot.ok()) {
    FUZZ_CHECK(snapshot.status().code() == StatusCode::kInvalidArgument, "unexpected code: %s",
               Describe(snapshot.status()).c_str());
    return 0;
  }
  FUZZ_CHECK(bytes.size() <= replication::kMaxSnapshotBytes, "an oversized snapshot decoded");
  FUZZ_CHECK(replication::ParseStreamId(snapshot->id).ok(), "a snapshot without a stream id");
  const Result<replication::GovernanceSnapshot> again =
      replication::DecodeSnapshot(replication::EncodeSnapshot(*snapshot));
  FUZZ_CHECK(again.ok(), "a decoded snapshot does not decode once encoded: %s",
             Describe(again.status()).c_str());
  FUZZ_CHECK(*again == *snapshot, "DecodeSnapshot(EncodeSnapshot(s)) != s");
  return 0;
}
