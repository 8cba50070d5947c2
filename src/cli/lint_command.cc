#include "cli/lint_command.h"

#include <httplib.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kvgov::cli {
namespace {

// kvgov refuses bodies over its --max-body-bytes (8 MiB by default): a file
// far over that is refused here, without reading it whole.
constexpr std::streamsize kMaxFileBytes = std::streamsize{64} << 20;

// The body of POST /v1/lint/prompt from a file holding a JSON array of
// requests, or one request a line. The requests are kvgov's to check.
std::string LintBody(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') return "{\"requests\":" + text + "}";
  std::string body = "{\"requests\":[";
  std::istringstream lines(text);
  bool any = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    body += (any ? "," : "") + line;
    any = true;
  }
  return body + "]}";
}

}  // namespace

CLI::App* AddLintCommand(CLI::App& app, LintFlags& flags) {
  CLI::App* command = app.add_subcommand(
      "lint",
      "Check requests against the prompt-prefix rules (a volatile span before static content,\n"
      "tools serialized two ways or in two orders, a cache_control breakpoint whose prefix\n"
      "changes), tokenized by an engine through a running kvgov, and print what fixing them\n"
      "would let the engines reuse. FILE: a JSON array of OpenAI chat or Anthropic messages\n"
      "requests, or one a line. Exits 1 when a rule is broken.\n"
      "Example: kvgov lint requests.jsonl --kvgov http://127.0.0.1:8787");
  command->add_option("FILE", flags.file, "The requests.")->required();
  command->add_option("--kvgov", flags.kvgov_url, "kvgov's URL, http://HOST:PORT or https://...")
      ->required();
  command
      ->add_option("--token", flags.token,
                   "A bearer token with the read role; prefer $KVGOV_TOKEN, which keeps it\n"
                   "out of the process list.")
      ->envname("KVGOV_TOKEN");
  return command;
}

int RunLint(const LintFlags& flags) {
  std::ifstream file(flags.file, std::ios::binary | std::ios::ate);
  if (!file) {
    std::fprintf(stderr, "kvgov lint: cannot read '%s'\n", flags.file.c_str());
    return 2;
  }
  const std::streamsize size = file.tellg();
  if (size > kMaxFileBytes) {
    std::fprintf(stderr, "kvgov lint: '%s' is %lld bytes, over the %lld-byte limit\n",
                 flags.file.c_str(), static_cast<long long>(size),
                 static_cast<long long>(kMaxFileBytes));
    return 2;
  }
  file.seekg(0);
  std::string text(static_cast<size_t>(size), '\0');
  file.read(text.data(), size);

  httplib::Client client(flags.kvgov_url);
  if (!client.is_valid()) {
    std::fprintf(stderr, "kvgov lint: --kvgov '%s': want http://HOST:PORT\n",
                 flags.kvgov_url.c_str());
    return 2;
  }
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(60));
  if (!flags.token.empty()) client.set_bearer_token_auth(flags.token);
  httplib::Result answer = client.Post("/v1/lint/prompt", LintBody(text), "application/json");
  if (!answer) {
    std::fprintf(stderr, "kvgov lint: %s: %s\n", flags.kvgov_url.c_str(),
                 httplib::to_string(answer.error()).c_str());
    return 2;
  }
  const nlohmann::json json =
      nlohmann::json::parse(answer->body, nullptr, /*allow_exceptions=*/false);
  if (answer->status != 200) {
    const std::string message =
        json.is_object() && json.contains("error") && json["error"].is_object()
            ? json["error"].value("message", answer->body)
            : answer->body;
    std::fprintf(stderr, "kvgov lint: refused (HTTP %d): %s\n", answer->status, message.c_str());
    return 2;
  }
  if (!json.is_object() || !json.contains("findings") || !json["findings"].is_array()) {
    std::fprintf(stderr, "kvgov lint: kvgov answered something else than a lint: %s\n",
                 answer->body.substr(0, 200).c_str());
    return 2;
  }
  for (const nlohmann::json& finding : json["findings"]) {
    std::printf("%s: %s: %s\n", finding.value("where", "").c_str(),
                finding.value("rule", "").c_str(), finding.value("detail", "").c_str());
  }
  const size_t requests = json.value("requests", nlohmann::json::array()).size();
  std::printf("%zu request%s, %zu finding%s", requests, requests == 1 ? "" : "s",
              json["findings"].size(), json["findings"].size() == 1 ? "" : "s");
  if (json.contains("shared_prefix_tokens")) {
    std::printf("; shared prefix %lld tokens as sent, %lld with the rules kept",
                json["shared_prefix_tokens"].get<long long>(),
                json.value("shared_prefix_tokens_if_fixed", 0LL));
  }
  std::printf("\n");
  return json["findings"].empty() ? 0 : 1;
}

}  // namespace kvgov::cli
