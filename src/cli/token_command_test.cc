// `kvgov token`'s help and the documents a new operator reads first list
// the same roles as src/auth, the one place roles are spelled (issue 43:
// the gateway's `infer` was missing from all of them).

#include "cli/token_command.h"

#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

#include "kvgov/auth/tokens.h"

namespace kvgov::cli {
namespace {

std::string ReadDoc(const std::string& relative) {
  std::ifstream file(std::string(KVGOV_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(file.good()) << relative;
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// The text from the line starting with `start` up to the next line starting
// with `end_prefix` (or the end).
std::string Section(const std::string& text, const std::string& start,
                    const std::string& end_prefix) {
  const size_t from = text.find("\n" + start);
  if (from == std::string::npos) return "";
  const size_t to = text.find("\n" + end_prefix, from + 1 + start.size());
  return text.substr(from + 1, to == std::string::npos ? std::string::npos : to - from - 1);
}

std::string Quoted(std::string_view role) { return "`" + std::string(role) + "`"; }

TEST(TokenCommandTest, AddHelpListsEveryRoleWithWhatItOpensAndTheDefaultDataDir) {
  CLI::App app("kvgov");
  TokenFlags flags;
  AddTokenCommand(app, flags);
  const std::string help = flags.add->help();
  for (const auth::RoleInfo& role : auth::Roles()) {
    EXPECT_NE(help.find(std::string(role.name)), std::string::npos) << help;
    EXPECT_NE(help.find(std::string(role.grants)), std::string::npos) << help;
  }
  EXPECT_NE(help.find("Default: ./kvgov-data"), std::string::npos) << help;
  for (CLI::App* command : {flags.list, flags.revoke}) {
    EXPECT_NE(command->help().find("Default: ./kvgov-data"), std::string::npos) << command->help();
    EXPECT_NE(command->help().find("--redis "), std::string::npos) << command->help();
  }
}

TEST(TokenDocsTest, TheReadmeAndTheTokenFormatListEveryRole) {
  const std::string readme = Section(ReadDoc("README.md"), "- **Authentication**", "- **");
  ASSERT_FALSE(readme.empty());
  const std::string tokens = ReadDoc("docs/formats/tokens.md");
  const std::string roles_rule = Section(tokens, "| `roles` |", "|");
  ASSERT_FALSE(roles_rule.empty());
  for (const auth::RoleInfo& role : auth::Roles()) {
    EXPECT_NE(readme.find(Quoted(role.name)), std::string::npos)
        << "README's Authentication does not list " << role.name << ":\n"
        << readme;
    EXPECT_NE(roles_rule.find(Quoted(role.name)), std::string::npos)
        << "tokens.md's `roles` rule does not list " << role.name << ": " << roles_rule;
    EXPECT_NE(tokens.find("\n| " + Quoted(role.name) + " |"), std::string::npos)
        << "tokens.md's Roles table has no row for " << role.name;
  }
}

// The gateway admits `infer` tokens only: a `route` token made for it
// answers 403 there (operations.md once said to make one).
TEST(TokenDocsTest, OperationsGivesTheGatewaysCallersInferTokens) {
  const std::string operations = ReadDoc("docs/operations.md");
  EXPECT_EQ(operations.find("--role route"), std::string::npos);
  EXPECT_EQ(operations.find("the gateway `route`"), std::string::npos);
  const std::string tokens = Section(operations, "## Tokens", "## ");
  ASSERT_FALSE(tokens.empty());
  EXPECT_NE(tokens.find("--role infer"), std::string::npos) << tokens;
  EXPECT_NE(tokens.find("gateway (`--gateway-listen`) `infer`"), std::string::npos) << tokens;
}

}  // namespace
}  // namespace kvgov::cli
