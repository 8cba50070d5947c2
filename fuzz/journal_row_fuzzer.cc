// journal::DecodeRow: one value of the store's journal column, which
// `kvgov journal verify` reads from a store it does not trust. Checked,
// beyond no crash, leak or exception:
//  - a refusal is Corruption, worded "journal row: ...";
//  - the encoding is exact (docs/formats/journal.md section 2): a decoded
//    row encodes back to the very bytes it came from, so no two byte
//    strings decode to the same row, and a row cut short by one byte no
//    longer decodes (its framing accounts for every byte);
//  - a decoded row is of a format version this build reads (1, or 2 with
//    the actor and origin), and its hash (RowHash) can be computed: 64
//    lowercase hex digits.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "kvgov/journal/journal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgov;
  using namespace kvgov::fuzz;
  const std::string_view bytes = AsText(data, size);

  const Result<journal::Row> row = journal::DecodeRow(bytes);
  if (!row.ok()) {
    FUZZ_CHECK(row.status().code() == StatusCode::kCorruption, "unexpected code: %s",
               Describe(row.status()).c_str());
    FUZZ_CHECK(row.status().message().starts_with("journal row: "), "unworded error: %s",
               Describe(row.status()).c_str());
    return 0;
  }
  FUZZ_CHECK(row->format_version == 1 || row->format_version == journal::kRowFormatVersion,
             "format version %u", row->format_version);
  FUZZ_CHECK(row->format_version != 1 || (row->actor.empty() && row->origin.empty()),
             "a format-1 row with an actor or origin");
  FUZZ_CHECK(journal::EncodeRow(*row) == bytes, "EncodeRow(DecodeRow(x)) != x");
  FUZZ_CHECK(!journal::DecodeRow(bytes.substr(0, bytes.size() - 1)).ok(),
             "a row cut short by one byte still decodes");
  FUZZ_CHECK(IsLowerHex(journal::RowHash(*row), 64), "RowHash is not 64 lowercase hex digits");
  return 0;
}
