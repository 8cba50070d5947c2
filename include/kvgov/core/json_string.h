#pragma once

#include <string>
#include <string_view>

namespace kvgov {

/// Appends `text` as a JSON string in the one canonical form every kvgov
/// format uses (RFC 8785): `"` and `\` escaped, \b \f \n \r \t by their short
/// escapes, other control bytes as \u00xx with lowercase hex, every other
/// byte copied as is. Callers that need valid UTF-8 check it first. Block
/// keys (extra keys), engine-event extra keys and certificates all go
/// through here, so a LoRA name or salt spells the same in each.
void AppendJsonString(std::string& out, std::string_view text);

}  // namespace kvgov
