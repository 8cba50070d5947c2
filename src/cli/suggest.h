#pragma once

// "Did you mean" for a mistyped subcommand or flag: CLI11 only says what
// it did not expect.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace kvgov::cli {

/// The candidate nearest to `word` by edit distance, when it is near enough
/// to be a typo of it (at most 2 edits, and fewer than half its length);
/// the first such on a tie.
std::optional<std::string> ClosestName(std::string_view word,
                                       const std::vector<std::string>& candidates);

/// After `app` failed to parse argv: one "did you mean" line for each
/// argument that is not a subcommand or flag of the subcommand it was given
/// to but nearly is. "" when there is nothing to suggest.
std::string Suggestions(CLI::App& app, int argc, const char* const* argv);

}  // namespace kvgov::cli
