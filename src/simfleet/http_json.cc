#include "simfleet/http_json.h"

namespace kvgov::simfleet {
namespace {

Result<nlohmann::json> ParseAnswer(const httplib::Result& result, const std::string& what) {
  if (!result) return Status::Unavailable(what + ": " + httplib::to_string(result.error()));
  if (result->status < 200 || result->status >= 300) {
    return Status::Unavailable(what + ": HTTP " + std::to_string(result->status) + " " +
                               result->body.substr(0, 200));
  }
  nlohmann::json answer = nlohmann::json::parse(result->body, nullptr, /*allow_exceptions=*/false);
  if (answer.is_discarded() || !answer.is_object()) {
    return Status::Unavailable(what + ": the answer is not a JSON object");
  }
  return answer;
}

}  // namespace

void TuneForRequests(httplib::Client& client) {
  client.set_keep_alive(true);
  client.set_tcp_nodelay(true);
}

Result<nlohmann::json> PostJson(httplib::Client& client, const std::string& what,
                                const std::string& path, const nlohmann::json& body,
                                const httplib::Headers& headers) {
  return ParseAnswer(client.Post(path, headers, body.dump(), "application/json"), what);
}

Result<nlohmann::json> GetJson(httplib::Client& client, const std::string& path) {
  return ParseAnswer(client.Get(path), "GET " + path);
}

}  // namespace kvgov::simfleet
