// The one-pass engine-batch decoder against the object path it stands in
// front of (src/adapters/one_pass_decoder.h, docs/adr/0025), on the same
// bytes under the default limits and under tight ones. Checked: whenever the
// one pass returns a batch, the object path returns the same batch; the
// sanitizers and libFuzzer check the rest (no crash, leak or overflow).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string_view>

#include "adapters/one_pass_decoder.h"

namespace {

void ExpectAgreement(std::string_view payload, const kvgov::adapters::MsgpackLimits& limits) {
  const auto fast = kvgov::adapters::internal::DecodeEngineBatchInOnePass(payload, limits);
  if (!fast.has_value()) return;
  const auto objects = kvgov::adapters::internal::DecodeEngineBatchByObjects(payload, limits);
  if (!objects.ok()) {
    std::fprintf(stderr, "the one pass took a payload the object path refuses: %s\n",
                 objects.status().ToString().c_str());
    std::abort();
  }
  if (!(*fast == *objects)) {
    std::fprintf(stderr, "the one pass and the object path decoded different batches\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view payload(reinterpret_cast<const char*>(data), size);
  ExpectAgreement(payload, {});
  kvgov::adapters::MsgpackLimits tight;
  tight.max_array = 8;
  tight.max_map = 6;
  tight.max_str = 12;
  tight.max_bin = 8;
  tight.max_depth = 4;
  ExpectAgreement(payload, tight);
  return 0;
}
