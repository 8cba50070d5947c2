#include "cli/suggest.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <numeric>

namespace kvgov::cli {
namespace {

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The deepest subcommand argv reached.
CLI::App* Deepest(CLI::App& app) {
  CLI::App* current = &app;
  for (std::vector<CLI::App*> parsed = current->get_subcommands(); !parsed.empty();
       parsed = current->get_subcommands()) {
    current = parsed.front();
  }
  return current;
}

}  // namespace

std::optional<std::string> ClosestName(std::string_view word,
                                       const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = 3;  // at most 2 edits
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(word, candidate);
    if (distance < best_distance && 2 * distance < word.size()) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string Suggestions(CLI::App& app, int argc, const char* const* argv) {
  CLI::App* given = Deepest(app);
  std::vector<std::string> flags;
  for (const CLI::Option* option : given->get_options()) {
    for (const std::string& name : option->get_lnames()) flags.push_back("--" + name);
  }
  std::vector<std::string> subcommands;
  for (const CLI::App* sub : given->get_subcommands([](const CLI::App*) { return true; })) {
    subcommands.push_back(sub->get_name());
  }
  const auto is_flag = [&](std::string_view name) {
    return std::find(flags.begin(), flags.end(), name) != flags.end();
  };
  const std::string where = "' is not a flag of '" + given->get_name() + "'; ";
  std::string out;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.starts_with("--")) {
      arg = arg.substr(0, arg.find('='));
      if (is_flag(arg)) continue;
      if (std::optional<std::string> near = ClosestName(arg, flags)) {
        out += "kvgov: '" + std::string(arg) + where + "did you mean '" + *near + "'?\n";
        continue;
      }
      // A flag's first words (--gateway for --gateway-listen) are too far
      // from it by edits but plainly meant it.
      std::vector<std::string> longer;
      for (const std::string& flag : flags) {
        if (flag.starts_with(std::string(arg) + "-")) longer.push_back("'" + flag + "'");
      }
      if (!longer.empty()) {
        out += "kvgov: '" + std::string(arg) + where + "did you mean ";
        for (size_t j = 0; j < longer.size(); ++j) {
          out += (j == 0 ? "" : j + 1 == longer.size() ? " or " : ", ") + longer[j];
        }
        out += "?\n";
      }
    } else if (arg.size() > 2 && arg[0] == '-' &&
               std::isalpha(static_cast<unsigned char>(arg[1]))) {
      arg = arg.substr(0, arg.find('='));
      const std::string doubled = "-" + std::string(arg);
      if (is_flag(doubled)) {
        out += "kvgov: '" + std::string(arg) + where + "long flags take two dashes: '";
        out += doubled + "'\n";
      }
    } else if (!arg.starts_with("-") && given->get_subcommands().empty() && !subcommands.empty() &&
               std::find(subcommands.begin(), subcommands.end(), arg) == subcommands.end()) {
      if (std::optional<std::string> near = ClosestName(arg, subcommands)) {
        out += "kvgov: '" + std::string(arg) + "' is not a command of '" + given->get_name() +
               "'; did you mean '" + *near + "'?\n";
      }
    }
  }
  return out;
}

}  // namespace kvgov::cli
