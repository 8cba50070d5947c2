// replication::DecodeLogEntry: the field value of one governance log entry,
// read from a Redis Stream every replica shares and none fully trusts (any
// client with access to Redis can XADD). Checked, beyond no crash, leak or
// exception:
//  - a refusal is InvalidArgument or ResourceExhausted (over the limit),
//    never anything else, and every input over kMaxLogEntryBytes is refused;
//  - a decoded entry round-trips: encoding it and decoding that gives the
//    same entry (so what one replica applies, another decodes alike);
//  - every write names a known column and has a key.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "kvgov/replication/governance_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgov;
  using namespace kvgov::fuzz;
  const std::string_view bytes = AsText(data, size);

  const Result<replication::LogEntry> entry = replication::DecodeLogEntry(bytes, "1-0");
  if (!entry.ok()) {
    const StatusCode code = entry.status().code();
    FUZZ_CHECK(code == StatusCode::kInvalidArgument || code == StatusCode::kResourceExhausted,
               "unexpected code: %s", Describe(entry.status()).c_str());
    return 0;
  }
  FUZZ_CHECK(bytes.size() <= replication::kMaxLogEntryBytes, "an oversized entry decoded");
  FUZZ_CHECK(entry->id == "1-0", "the id is not the one given");
  for (const replication::LogWrite& write : entry->writes) {
    FUZZ_CHECK(write.column == "governance" || write.column == "tokens", "unknown column '%s'",
               write.column.c_str());
  }
  const Result<replication::LogEntry> again =
      replication::DecodeLogEntry(replication::EncodeLogEntry(*entry), "1-0");
  FUZZ_CHECK(again.ok(), "a decoded entry does not decode once encoded: %s",
             Describe(again.status()).c_str());
  FUZZ_CHECK(*again == *entry, "DecodeLogEntry(EncodeLogEntry(e)) != e");
  return 0;
}
