#include "cli/suggest.h"

#include <CLI/CLI.hpp>

#include <gtest/gtest.h>

namespace kvgov::cli {
namespace {

TEST(ClosestNameTest, ATypoIsNearAndAnotherWordIsNot) {
  const std::vector<std::string> flags = {"--gateway-listen", "--listen", "--data-dir"};
  EXPECT_EQ(ClosestName("--gatway-listen", flags), "--gateway-listen");
  EXPECT_EQ(ClosestName("--lisen", flags), "--listen");
  EXPECT_EQ(ClosestName("--data-dri", flags), "--data-dir");
  EXPECT_FALSE(ClosestName("--verbose", flags).has_value());
  // Two edits of a three-letter word are not a typo of it.
  EXPECT_FALSE(ClosestName("abc", {"xyc"}).has_value());
}

// A small command line shaped like kvgov's: what a failed parse suggests.
TEST(SuggestionsTest, NamesTheNearestCommandOrFlag) {
  auto parse = [](std::vector<const char*> argv) {
    CLI::App app("kvgov");
    app.require_subcommand(1);
    std::string listen;
    CLI::App* serve = app.add_subcommand("serve", "");
    serve->add_option("--gateway-listen", listen, "");
    serve->add_option("--gateway-ready-file", listen, "");
    serve->add_option("--listen", listen, "");
    app.add_subcommand("simulate", "");
    argv.insert(argv.begin(), "kvgov");
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError&) {
      return Suggestions(app, static_cast<int>(argv.size()), argv.data());
    }
    return std::string("parsed");
  };
  EXPECT_EQ(parse({"serve", "--gatway-listen", "x"}),
            "kvgov: '--gatway-listen' is not a flag of 'serve'; did you mean "
            "'--gateway-listen'?\n");
  EXPECT_EQ(parse({"serv"}), "kvgov: 'serv' is not a command of 'kvgov'; did you mean 'serve'?\n");
  EXPECT_EQ(parse({"serve", "--nothing-like-it"}), "");
  // A flag's first word names every flag it begins.
  EXPECT_EQ(parse({"serve", "--gateway", "x"}),
            "kvgov: '--gateway' is not a flag of 'serve'; did you mean '--gateway-listen' or "
            "'--gateway-ready-file'?\n");
  // One dash where two belong.
  EXPECT_EQ(parse({"serve", "-listen", "x"}),
            "kvgov: '-listen' is not a flag of 'serve'; long flags take two dashes: "
            "'--listen'\n");
  EXPECT_EQ(parse({"serve", "-listen=x"}),
            "kvgov: '-listen' is not a flag of 'serve'; long flags take two dashes: "
            "'--listen'\n");
  EXPECT_EQ(parse({"serve", "--gateway-listen=x"}), "parsed");
}

}  // namespace
}  // namespace kvgov::cli
