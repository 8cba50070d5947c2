#include "kvgov/sim/workload.h"

#include <algorithm>
#include <cmath>

namespace kvgov::sim {
namespace {

// SplitMix64 with explicit arithmetic for every draw, so a trace is the
// same on every standard library (std::*_distribution is not).
class TraceRandom {
 public:
  explicit TraceRandom(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Exponential(double mean) { return -mean * std::log1p(-Uniform()); }
  uint64_t Below(uint64_t bound) { return Next() % bound; }

  std::vector<int64_t> Tokens(int64_t count) {
    constexpr uint64_t kVocabulary = 32000;
    std::vector<int64_t> tokens(static_cast<size_t>(count));
    for (int64_t& token : tokens) token = static_cast<int64_t>(Below(kVocabulary));
    return tokens;
  }

 private:
  uint64_t state_;
};

// An exponential draw around `mean`, rounded, at least `floor`, at most 8x the mean.
int64_t LengthAround(TraceRandom& random, int64_t mean, int64_t floor) {
  const double m = static_cast<double>(mean);
  return std::max<int64_t>(floor, std::llround(std::min(random.Exponential(m), 8 * m)));
}

void Append(std::vector<int64_t>& to, const std::vector<int64_t>& tokens) {
  to.insert(to.end(), tokens.begin(), tokens.end());
}

void NumberByArrival(std::vector<SimRequest>& requests) {
  std::stable_sort(requests.begin(), requests.end(), [](const SimRequest& a, const SimRequest& b) {
    return a.arrival_s < b.arrival_s;
  });
  for (size_t i = 0; i < requests.size(); ++i) requests[i].id = i;
}

}  // namespace

Result<std::vector<SimRequest>> AgentWorkload(const AgentWorkloadOptions& options) {
  if (options.tenants <= 0 || options.sessions_per_tenant <= 0 || options.turns <= 0) {
    return Status::InvalidArgument("agent workload: tenants, sessions and turns must be positive");
  }
  if (options.system_prompt_tokens < 0 || options.message_tokens <= 0 ||
      options.answer_tokens < 0) {
    return Status::InvalidArgument(
        "agent workload: message tokens must be positive, prompt and answer tokens >= 0");
  }
  if (!(options.session_starts_per_s > 0) || !(options.think_time_s >= 0)) {
    return Status::InvalidArgument(
        "agent workload: the session start rate must be positive, think time >= 0");
  }
  TraceRandom random(options.seed);
  std::vector<std::vector<int64_t>> system_prompts;
  system_prompts.reserve(static_cast<size_t>(options.tenants));
  for (int t = 0; t < options.tenants; ++t) {
    system_prompts.push_back(random.Tokens(options.system_prompt_tokens));
  }
  // Sessions of all tenants interleave: each starts at the next Poisson
  // arrival, owned by a random tenant.
  const int sessions = options.tenants * options.sessions_per_tenant;
  std::vector<SimRequest> requests;
  double session_start = 0;
  for (int s = 0; s < sessions; ++s) {
    session_start += random.Exponential(1.0 / options.session_starts_per_s);
    const int tenant = s % options.tenants;
    std::vector<int64_t> transcript = system_prompts[static_cast<size_t>(tenant)];
    double at = session_start;
    for (int turn = 0; turn < options.turns; ++turn) {
      Append(transcript, random.Tokens(options.message_tokens));
      SimRequest request;
      request.arrival_s = at;
      request.tenant = "tenant-" + std::to_string(tenant);
      request.session = request.tenant + "/session-" + std::to_string(s);
      request.tokens = transcript;
      request.output_tokens = options.answer_tokens;
      requests.push_back(std::move(request));
      Append(transcript, random.Tokens(options.answer_tokens));
      at += random.Exponential(options.think_time_s);
    }
  }
  NumberByArrival(requests);
  return requests;
}

Result<std::vector<SimRequest>> SharedPrefixWorkload(const SharedPrefixWorkloadOptions& options) {
  if (options.groups <= 0 || options.requests <= 0 || options.question_tokens <= 0 ||
      options.system_prompt_tokens < 0) {
    return Status::InvalidArgument(
        "shared-prefix workload: groups, requests and question tokens must be positive");
  }
  if (options.answer_tokens < 0) {
    return Status::InvalidArgument("shared-prefix workload: answer tokens must be >= 0");
  }
  if (!(options.requests_per_s > 0)) {
    return Status::InvalidArgument("shared-prefix workload: the request rate must be positive");
  }
  TraceRandom random(options.seed);
  std::vector<std::vector<int64_t>> system_prompts;
  system_prompts.reserve(static_cast<size_t>(options.groups));
  for (int g = 0; g < options.groups; ++g) {
    system_prompts.push_back(random.Tokens(options.system_prompt_tokens));
  }
  std::vector<SimRequest> requests;
  requests.reserve(static_cast<size_t>(options.requests));
  double at = 0;
  for (int r = 0; r < options.requests; ++r) {
    at += random.Exponential(1.0 / options.requests_per_s);
    const size_t group = random.Below(static_cast<uint64_t>(options.groups));
    SimRequest request;
    request.arrival_s = at;
    request.session = "group-" + std::to_string(group);
    request.tokens.reserve(system_prompts[group].size() +
                           static_cast<size_t>(options.question_tokens));
    request.tokens = system_prompts[group];
    Append(request.tokens, random.Tokens(options.question_tokens));
    if (options.answer_tokens > 0) {
      request.output_tokens = LengthAround(random, options.answer_tokens, 1);
    }
    requests.push_back(std::move(request));
  }
  NumberByArrival(requests);
  return requests;
}

Result<std::vector<SimRequest>> ConversationWorkload(const ConversationWorkloadOptions& options) {
  if (options.sessions <= 0 || options.min_turns <= 0 || options.max_turns < options.min_turns) {
    return Status::InvalidArgument(
        "conversation workload: sessions must be positive and 0 < min_turns <= max_turns");
  }
  if (options.system_prompt_tokens < 0 || options.message_tokens <= 0 ||
      options.answer_tokens <= 0) {
    return Status::InvalidArgument(
        "conversation workload: message and answer tokens must be positive, the system "
        "prompt's >= 0");
  }
  if (!(options.session_starts_per_s > 0) || !(options.think_time_s >= 0)) {
    return Status::InvalidArgument(
        "conversation workload: the session start rate must be positive, think time >= 0");
  }
  TraceRandom random(options.seed);
  const std::vector<int64_t> system_prompt = random.Tokens(options.system_prompt_tokens);
  // Fits an int: 0 < min_turns <= max_turns, checked above.
  const int turn_choices = options.max_turns - options.min_turns + 1;
  std::vector<SimRequest> requests;
  double session_start = 0;
  for (int s = 0; s < options.sessions; ++s) {
    session_start += random.Exponential(1.0 / options.session_starts_per_s);
    const int turns =
        options.min_turns + static_cast<int>(random.Below(static_cast<uint64_t>(turn_choices)));
    std::vector<int64_t> transcript = system_prompt;
    double at = session_start;
    for (int turn = 0; turn < turns; ++turn) {
      Append(transcript, random.Tokens(LengthAround(random, options.message_tokens, 16)));
      SimRequest request;
      request.arrival_s = at;
      request.session = "session-" + std::to_string(s);
      request.tokens = transcript;
      request.output_tokens = LengthAround(random, options.answer_tokens, 16);
      Append(transcript, random.Tokens(request.output_tokens));
      requests.push_back(std::move(request));
      at += random.Exponential(options.think_time_s);
    }
  }
  NumberByArrival(requests);
  return requests;
}

Result<std::vector<SimRequest>> DocumentQaWorkload(const DocumentQaWorkloadOptions& options) {
  if (options.documents <= 0 || options.requests <= 0 || options.min_document_tokens <= 0 ||
      options.max_document_tokens < options.min_document_tokens) {
    return Status::InvalidArgument(
        "document-qa workload: documents and requests must be positive and 0 < "
        "min_document_tokens <= max_document_tokens");
  }
  if (options.question_tokens <= 0 || options.answer_tokens <= 0) {
    return Status::InvalidArgument(
        "document-qa workload: question and answer tokens must be positive");
  }
  if (!(options.requests_per_s > 0) || !(options.zipf_exponent >= 0)) {
    return Status::InvalidArgument(
        "document-qa workload: the request rate must be positive, the Zipf exponent >= 0");
  }
  TraceRandom random(options.seed);
  std::vector<std::vector<int64_t>> documents;
  documents.reserve(static_cast<size_t>(options.documents));
  const uint64_t spread =
      static_cast<uint64_t>(options.max_document_tokens - options.min_document_tokens + 1);
  for (int d = 0; d < options.documents; ++d) {
    documents.push_back(
        random.Tokens(options.min_document_tokens + static_cast<int64_t>(random.Below(spread))));
  }
  // Document d is asked about with weight 1 / (d + 1)^s: drawn by its
  // cumulative weight.
  std::vector<double> cumulative;
  double total = 0;
  for (int d = 0; d < options.documents; ++d) {
    total += std::pow(static_cast<double>(d + 1), -options.zipf_exponent);
    cumulative.push_back(total);
  }
  std::vector<SimRequest> requests;
  requests.reserve(static_cast<size_t>(options.requests));
  double at = 0;
  for (int r = 0; r < options.requests; ++r) {
    at += random.Exponential(1.0 / options.requests_per_s);
    const double draw = random.Uniform() * total;
    const size_t document = std::min<size_t>(
        static_cast<size_t>(std::upper_bound(cumulative.begin(), cumulative.end(), draw) -
                            cumulative.begin()),
        documents.size() - 1);
    SimRequest request;
    request.arrival_s = at;
    request.session = "document-" + std::to_string(document);
    request.tokens = documents[document];
    Append(request.tokens, random.Tokens(LengthAround(random, options.question_tokens, 16)));
    request.output_tokens = LengthAround(random, options.answer_tokens, 1);
    requests.push_back(std::move(request));
  }
  NumberByArrival(requests);
  return requests;
}

Result<std::vector<SimRequest>> BurstWorkload(const BurstWorkloadOptions& options) {
  if (options.prompts <= 0 || options.prompt_tokens <= 0 || options.suffix_tokens <= 0 ||
      options.answer_tokens <= 0) {
    return Status::InvalidArgument(
        "burst workload: prompts, prompt, suffix and answer tokens must be positive");
  }
  if (options.bursts < 0 || options.burst_requests < 0 || options.burst_prompts <= 0 ||
      options.burst_prompts > options.prompts) {
    return Status::InvalidArgument(
        "burst workload: bursts and their requests must be >= 0 and 0 < burst_prompts <= "
        "prompts");
  }
  if (!(options.background_per_s > 0) || !(options.duration_s > 0) ||
      !(options.burst_window_s > 0)) {
    return Status::InvalidArgument(
        "burst workload: the background rate, duration and burst window must be positive");
  }
  TraceRandom random(options.seed);
  std::vector<std::vector<int64_t>> prompts;
  prompts.reserve(static_cast<size_t>(options.prompts));
  for (int p = 0; p < options.prompts; ++p) prompts.push_back(random.Tokens(options.prompt_tokens));
  std::vector<SimRequest> requests;
  const auto add = [&](double at, size_t prompt, std::string group) {
    SimRequest request;
    request.arrival_s = at;
    request.session = std::move(group);
    request.tokens = prompts[prompt];
    Append(request.tokens, random.Tokens(options.suffix_tokens));
    request.output_tokens = LengthAround(random, options.answer_tokens, 1);
    requests.push_back(std::move(request));
  };
  for (double at = random.Exponential(1.0 / options.background_per_s); at < options.duration_s;
       at += random.Exponential(1.0 / options.background_per_s)) {
    add(at, random.Below(static_cast<uint64_t>(options.prompts)), "background");
  }
  for (int b = 0; b < options.bursts; ++b) {
    const double start = options.duration_s * (b + 1) / (options.bursts + 1);
    for (int r = 0; r < options.burst_requests; ++r) {
      add(start + random.Uniform() * options.burst_window_s,
          random.Below(static_cast<uint64_t>(options.burst_prompts)), "burst-" + std::to_string(b));
    }
  }
  NumberByArrival(requests);
  return requests;
}

int64_t SharedPrefixBlocks(const SharedPrefixWorkloadOptions& options, int64_t block_size) {
  return options.groups * (options.system_prompt_tokens / block_size);
}

}  // namespace kvgov::sim
