#include "kvgov/router/router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <string_view>

#include "kvgov/index/block_key.h"

namespace kvgov::router {
namespace {

constexpr int64_t kBlockSize = 4;

std::vector<int64_t> Tokens(size_t blocks, int64_t start = 1) {
  std::vector<int64_t> tokens(blocks * kBlockSize);
  std::iota(tokens.begin(), tokens.end(), start);
  return tokens;
}

class RouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* id : {"w1", "w2", "w3"}) {
      ASSERT_TRUE(index_.AddWorker(id, "llama", kBlockSize).ok());
      ASSERT_TRUE(status_.Add(id, /*probed=*/false).ok());
    }
  }

  // Places the first `blocks` blocks of `tokens` on `worker` in `tier`, as
  // the tenant with `salt` would have stored them.
  void Hold(const std::string& worker, const std::vector<int64_t>& tokens, size_t blocks,
            ResidencyTier tier = ResidencyTier::kHBM, std::string_view salt = "") {
    std::vector<index::BlockKey> chain =
        index::RequestChain(index_.hasher(), {"llama", "", 0}, salt, tokens, kBlockSize);
    chain.resize(blocks);
    ASSERT_TRUE(index_.AddBlocks(worker, chain, tier).ok());
  }

  RouteDecision Route(const std::vector<int64_t>& tokens, std::string_view salt = "",
                      std::vector<std::string> allowed = {}) {
    RouteRequest request{"llama", "", tokens, "", std::move(allowed)};
    Result<RouteDecision> decision =
        router_.Route(request, salt, "d" + std::to_string(next_id_++), 1000);
    EXPECT_TRUE(decision.ok()) << decision.status().ToString();
    return decision.ok() ? *decision : RouteDecision{};
  }

  const Candidate& CandidateOf(const RouteDecision& decision, const std::string& worker) {
    for (const Candidate& c : decision.candidates) {
      if (c.worker == worker) return c;
    }
    ADD_FAILURE() << "no candidate " << worker;
    return decision.candidates.front();
  }

  index::ResidencyIndex index_;
  WorkerStatusTable status_;
  // Unit overlap weight and no cache pressure: the tests below check the
  // cost's arithmetic (the pressure term has tests of its own).
  RouteWeights weights_ = [] {
    RouteWeights weights;
    weights.overlap_weight = 1.0;
    weights.cache_pressure_weight = 0;
    return weights;
  }();
  Router router_{&index_, &status_, weights_};
  int next_id_ = 0;
};

// The decode step of a handoff: the pinned blocks cost pull_weight each to
// a worker that lacks them, instead of their prefill, and nothing to one
// that holds them.
TEST_F(RouterTest, PullableBlocksCostTheirPullNotTheirPrefill) {
  std::vector<int64_t> prompt = Tokens(8);
  Hold("w2", prompt, 6);
  RouteRequest request{"llama", "", prompt, "", {}};
  request.pullable_blocks = 8;
  Result<RouteDecision> decision = router_.Route(request, "", "decode-1", 1000);
  ASSERT_TRUE(decision.ok()) << decision.status().ToString();
  EXPECT_EQ(decision->worker, "w2");
  const Candidate& w1 = CandidateOf(*decision, "w1");
  const Candidate& w2 = CandidateOf(*decision, "w2");
  EXPECT_EQ(w1.pulled_blocks, 8u);
  EXPECT_EQ(w2.pulled_blocks, 2u);
  EXPECT_DOUBLE_EQ(w1.cost, weights_.pull_weight * 8);  // nothing left to prefill
  EXPECT_DOUBLE_EQ(w2.cost, weights_.pull_weight * 2);
  // The load the decision leaves is the one block of a request with nothing
  // to prefill.
  EXPECT_EQ(router_.LoadOf("w2").in_flight_blocks, 1u);

  // A pin shorter than the prompt: the rest is still prefilled.
  request.pullable_blocks = 4;
  Result<RouteDecision> partial = router_.Route(request, "", "decode-2", 1000);
  ASSERT_TRUE(partial.ok());
  EXPECT_DOUBLE_EQ(CandidateOf(*partial, "w3").cost, 4 + weights_.pull_weight * 4);
  EXPECT_EQ(CandidateOf(*partial, "w2").pulled_blocks, 0u);
}

TEST_F(RouterTest, LongerPrefixWinsAtEqualLoad) {
  std::vector<int64_t> prompt = Tokens(8);
  Hold("w1", prompt, 2);
  Hold("w2", prompt, 6);
  RouteDecision decision = Route(prompt);
  EXPECT_EQ(decision.worker, "w2");
  EXPECT_EQ(decision.prompt_blocks, 8u);
  EXPECT_EQ(decision.overlap_blocks, 6u);
  EXPECT_EQ(decision.verdict.kind, LookupKind::kHit);
  ASSERT_EQ(decision.candidates.size(), 3u);
  EXPECT_EQ(decision.candidates[0].worker, "w2");
  EXPECT_EQ(decision.candidates[1].worker, "w1");
  EXPECT_DOUBLE_EQ(decision.candidates[0].cost, 2.0);  // 8 - 6 blocks to prefill
  EXPECT_DOUBLE_EQ(CandidateOf(decision, "w3").cost, 8.0);
}

TEST_F(RouterTest, LoadedWorkerLosesWhenOverlapDoesNotPayForIt) {
  std::vector<int64_t> prompt = Tokens(8);
  Hold("w1", prompt, 3);
  // Two requests already in flight on w1 (8 blocks each) cost more than the
  // 3 blocks of prefill its overlap saves.
  RouteDecision first = Route(Tokens(8, 1000), "", {"w1"});
  RouteDecision second = Route(Tokens(8, 2000), "", {"w1"});
  ASSERT_EQ(first.worker, "w1");
  ASSERT_EQ(second.worker, "w1");
  RouteDecision decision = Route(prompt, "", {"w1", "w2"});
  EXPECT_EQ(decision.worker, "w2");
  const Candidate& w1 = CandidateOf(decision, "w1");
  EXPECT_EQ(w1.load.in_flight_requests, 2u);
  EXPECT_EQ(w1.load.in_flight_blocks, 16u);
  EXPECT_DOUBLE_EQ(w1.cost, 5.0 + 16.0);

  // Once those requests are done, the overlap wins again.
  ASSERT_TRUE(router_.Done(first.decision_id).ok());
  ASSERT_TRUE(router_.Done(second.decision_id).ok());
  EXPECT_EQ(router_.Done(second.decision_id).code(), StatusCode::kNotFound);
  EXPECT_EQ(Route(prompt, "", {"w1", "w2"}).worker, "w1");
}

TEST_F(RouterTest, PeerReplicasLoadCountsLikeOwn) {
  std::vector<int64_t> prompt = Tokens(8);
  Hold("w1", prompt, 3);
  RouteDecision own = Route(Tokens(8, 1000), "", {"w2"});
  ASSERT_EQ(own.worker, "w2");
  EXPECT_EQ(router_.InFlightBlocks(), (std::map<std::string, uint64_t, std::less<>>{{"w2", 8}}));

  // Other replicas have 16 blocks in flight on w1: its 3 blocks of overlap
  // no longer pay for that.
  router_.SetPeerLoad({{"w1", 16}});
  RouteDecision decision = Route(prompt, "", {"w1", "w3"});
  EXPECT_EQ(decision.worker, "w3");
  const Candidate& w1 = CandidateOf(decision, "w1");
  EXPECT_EQ(w1.load.peer_blocks, 16u);
  EXPECT_EQ(w1.load.in_flight_blocks, 0u);
  EXPECT_DOUBLE_EQ(w1.cost, 5.0 + 16.0);
  // Peer load is not this router's to publish again.
  EXPECT_EQ(router_.InFlightBlocks().count("w1"), 0u);

  router_.SetPeerLoad({});
  EXPECT_EQ(Route(prompt, "", {"w1", "w3"}).worker, "w1");
}

TEST_F(RouterTest, ATenantReleasesOnlyItsOwnDecisions) {
  RouteRequest request{"llama", "tenant-a", Tokens(8), "", {}};
  Result<RouteDecision> decision = router_.Route(request, "salt-a", "da", 1000);
  ASSERT_TRUE(decision.ok()) << decision.status().ToString();
  // Another tenant's token cannot release it, and learns nothing from trying.
  Status foreign = router_.Done("da", "tenant-b");
  EXPECT_EQ(foreign.code(), StatusCode::kNotFound);
  EXPECT_EQ(foreign.message(), "decision 'da' is unknown or already released");
  EXPECT_EQ(router_.LoadOf(decision->worker).in_flight_requests, 1u);
  EXPECT_TRUE(router_.Done("da", "tenant-a").ok());
  EXPECT_EQ(router_.LoadOf(decision->worker).in_flight_requests, 0u);

  // A fleet-wide caller releases any.
  ASSERT_TRUE(router_.Route(request, "salt-a", "db", 1000).ok());
  EXPECT_TRUE(router_.Done("db").ok());
}

// A decision weighs its prefill until its first token, then
// decode_load_weight x its prompt (rounded up) until it is done; a decoding
// request on a worker then costs a new prompt less than a queued prefill.
TEST_F(RouterTest, APrefilledDecisionWeighsItsDecodeNotItsPrefill) {
  const std::vector<int64_t> cold = Tokens(40, 1000);
  const RouteDecision first = Route(cold, "", {"w1"});
  ASSERT_EQ(first.worker, "w1");
  EXPECT_EQ(router_.LoadOf("w1").in_flight_blocks, 40u);
  EXPECT_EQ(router_.LoadOf("w1").decoding_requests, 0u);
  // With w2 idle, a prompt w1 holds 20 blocks of still goes to w2 while w1's
  // prefill is queued (20 + 40 > 40)...
  const std::vector<int64_t> prompt = Tokens(40);
  Hold("w1", prompt, 20);
  EXPECT_EQ(Route(prompt, "", {"w1", "w2"}).worker, "w2");
  ASSERT_TRUE(router_.Done("d1").ok());

  // ...and to w1 once that request decodes: ceil(40 / 16) = 3.
  ASSERT_TRUE(router_.Prefilled(first.decision_id).ok());
  const WorkerLoad decoding = router_.LoadOf("w1");
  EXPECT_EQ(decoding.in_flight_requests, 1u);
  EXPECT_EQ(decoding.decoding_requests, 1u);
  EXPECT_EQ(decoding.in_flight_blocks, 3u);
  EXPECT_EQ(Route(prompt, "", {"w1", "w2"}).worker, "w1");
  ASSERT_TRUE(router_.Done("d2").ok());

  // A second report changes nothing; Done releases the decode load.
  ASSERT_TRUE(router_.Prefilled(first.decision_id).ok());
  EXPECT_EQ(router_.LoadOf("w1").in_flight_blocks, 3u);
  ASSERT_TRUE(router_.Done(first.decision_id).ok());
  const WorkerLoad released = router_.LoadOf("w1");
  EXPECT_EQ(released.in_flight_requests, 0u);
  EXPECT_EQ(released.decoding_requests, 0u);
  EXPECT_EQ(released.in_flight_blocks, 0u);
  EXPECT_EQ(router_.Prefilled(first.decision_id).code(), StatusCode::kNotFound);
}

TEST_F(RouterTest, ATenantReportsOnlyItsOwnDecisionsPrefilled) {
  RouteRequest request{"llama", "tenant-a", Tokens(8), "", {}};
  Result<RouteDecision> decision = router_.Route(request, "salt-a", "da", 1000);
  ASSERT_TRUE(decision.ok()) << decision.status().ToString();
  Status foreign = router_.Prefilled("da", "tenant-b");
  EXPECT_EQ(foreign.code(), StatusCode::kNotFound);
  EXPECT_EQ(foreign.message(), "decision 'da' is unknown or already released");
  EXPECT_EQ(router_.LoadOf(decision->worker).decoding_requests, 0u);
  EXPECT_TRUE(router_.Prefilled("da", "tenant-a").ok());
  EXPECT_EQ(router_.LoadOf(decision->worker).decoding_requests, 1u);
}

TEST_F(RouterTest, ScrapedLoadCountsOnlyWhatKvgovDidNotRoute) {
  std::vector<int64_t> prompt = Tokens(8);
  Hold("w1", prompt, 8);
  ASSERT_TRUE(status_.RecordScrape("w1", {2, 1, 0.5, 1000}).ok());
  RouteDecision decision = Route(prompt, "", {"w1", "w2"});
  const Candidate& w1 = CandidateOf(decision, "w1");
  ASSERT_TRUE(w1.load.scraped.has_value());
  EXPECT_DOUBLE_EQ(w1.load.blocks, 3 * weights_.unrouted_request_blocks);
  EXPECT_EQ(decision.worker, "w2");  // 48 blocks of load outweigh 8 of prefill
}

// A worker whose engine drops salts from its events takes no tenant's
// routes (its blocks would key as unsalted); unsalted routes still go
// there. ADR 0019.
TEST_F(RouterTest, SaltBlindWorkersTakeNoTenantRoutes) {
  const std::vector<int64_t> prompt = Tokens(4);
  // Two salted requests come back without their salts.
  for (int64_t start : {1, 500}) {
    const std::vector<int64_t> first = Tokens(1, start);
    ASSERT_TRUE(
        index_.ExpectSaltedRoot("w1", index::SaltlessRoot(index_.hasher(), {"llama", "", 0}, first))
            .ok());
    BlockStored returned;
    returned.block_hashes = {static_cast<EngineHash>(start)};
    returned.token_ids = first;
    returned.block_size = kBlockSize;
    returned.medium = "GPU";
    ASSERT_TRUE(index_.Apply("w1", returned).ok());
  }
  ASSERT_EQ(index_.Worker("w1")->salts, index::SaltReporting::kNotReported);

  RouteDecision tenant = Route(prompt, "salt-a", {"w1"});
  EXPECT_TRUE(tenant.worker.empty());
  EXPECT_EQ(CandidateOf(tenant, "w1").reason, "salt_blind");
  EXPECT_NE(Route(prompt, "salt-a").worker, "w1");
  EXPECT_EQ(Route(prompt, "", {"w1"}).worker, "w1");
}

// A diverted request (it crosses a quarantine) goes only to engines whose
// events proved they key by the salt: an engine ignoring it would reuse the
// quarantined KV. ADR 0028.
TEST_F(RouterTest, DivertedRoutesGoOnlyWhereSaltsAreProvenHonoured) {
  const std::vector<int64_t> prompt = Tokens(4);
  RouteRequest diverted{"llama", "", prompt, "", {}};
  diverted.salt_must_be_honoured = true;
  Result<RouteDecision> unproven = router_.Route(diverted, "salt-a.1", "d1", 1000);
  ASSERT_TRUE(unproven.ok()) << unproven.status().ToString();
  EXPECT_TRUE(unproven->worker.empty());
  for (const Candidate& candidate : unproven->candidates) {
    EXPECT_EQ(candidate.reason, "salt_unverified") << candidate.worker;
  }
  // w2's events show a salted root: it keys by the salt.
  BlockStored salted;
  salted.block_hashes = {7};
  salted.token_ids = Tokens(1, 900);
  salted.block_size = kBlockSize;
  salted.medium = "GPU";
  salted.extra_keys = {"[\"salt-z\"]"};
  ASSERT_TRUE(index_.Apply("w2", salted).ok());
  ASSERT_EQ(index_.Worker("w2")->salts, index::SaltReporting::kReported);
  Result<RouteDecision> proven = router_.Route(diverted, "salt-a.1", "d2", 1000);
  ASSERT_TRUE(proven.ok()) << proven.status().ToString();
  EXPECT_EQ(proven->worker, "w2");
  // An ordinary salted route still takes an unknown engine.
  diverted.salt_must_be_honoured = false;
  EXPECT_FALSE(router_.Route(diverted, "salt-a", "d3", 1000)->worker.empty());
}

// A dry run decides as Route would and leaves no load behind.
TEST_F(RouterTest, ExplainDecidesAsRouteWouldAndKeepsNoLoad) {
  const std::vector<int64_t> prompt = Tokens(8);
  Hold("w2", prompt, 5);
  RouteRequest request{"llama", "", prompt, "", {}};
  Result<RouteDecision> explained = router_.Explain(request, "", 1000);
  ASSERT_TRUE(explained.ok()) << explained.status().ToString();
  EXPECT_EQ(explained->decision_id, "");
  EXPECT_EQ(explained->worker, "w2");
  EXPECT_EQ(router_.LoadOf("w2").in_flight_requests, 0u);
  const RouteDecision routed = Route(prompt);
  EXPECT_EQ(routed.worker, explained->worker);
  EXPECT_EQ(routed.overlap_blocks, explained->overlap_blocks);
  ASSERT_EQ(routed.candidates.size(), explained->candidates.size());
  for (size_t i = 0; i < routed.candidates.size(); ++i) {
    EXPECT_EQ(routed.candidates[i].worker, explained->candidates[i].worker);
    EXPECT_DOUBLE_EQ(routed.candidates[i].cost, explained->candidates[i].cost);
  }
  EXPECT_EQ(router_.LoadOf("w2").in_flight_requests, 1u);  // Route's, not Explain's
}

TEST_F(RouterTest, HbmBeatsDramAtEqualLength) {
  std::vector<int64_t> prompt = Tokens(4);
  Hold("w1", prompt, 4, ResidencyTier::kDRAM);
  Hold("w2", prompt, 4, ResidencyTier::kHBM);
  RouteDecision decision = Route(prompt);
  EXPECT_EQ(decision.worker, "w2");
  EXPECT_EQ(CandidateOf(decision, "w1").tier_overlap[1], 4u);
  EXPECT_DOUBLE_EQ(CandidateOf(decision, "w1").credited_blocks, 3.0);  // 4 x 0.75
  EXPECT_DOUBLE_EQ(CandidateOf(decision, "w2").credited_blocks, 4.0);
}

TEST_F(RouterTest, DrainedUnhealthyStaleAndDisallowedWorkersAreNeverChosen) {
  std::vector<int64_t> prompt = Tokens(4);
  Hold("w1", prompt, 4);
  Hold("w2", prompt, 4);
  Hold("w3", prompt, 4);
  ASSERT_TRUE(status_.SetDraining("w1", true).ok());
  ASSERT_TRUE(status_.Remove("w2").ok());
  ASSERT_TRUE(status_.Add("w2", /*probed=*/true).ok());  // probed, never answered
  ASSERT_TRUE(index_.SetState("w3", index::WorkerState::kStale).ok());
  RouteDecision decision = Route(prompt);
  EXPECT_TRUE(decision.worker.empty());
  EXPECT_EQ(decision.verdict.kind, LookupKind::kMiss);
  EXPECT_EQ(CandidateOf(decision, "w1").reason, "draining");
  EXPECT_EQ(CandidateOf(decision, "w2").reason, "unhealthy");
  EXPECT_EQ(CandidateOf(decision, "w3").reason, "stale");
  EXPECT_EQ(CandidateOf(decision, "w3").overlap_blocks, 0u);  // stale residency never counts

  ASSERT_TRUE(status_.RecordProbe("w2", true, 10).ok());
  EXPECT_EQ(Route(prompt).worker, "w2");
  EXPECT_EQ(Route(prompt, "", {"w3"}).worker, "");
  EXPECT_EQ(CandidateOf(Route(prompt, "", {"w3"}), "w2").reason, "not_allowed");
}

TEST_F(RouterTest, BusyWorkersAreSkipped) {
  RouteWeights weights;
  weights.busy_load_blocks = 8;
  Router router(&index_, &status_, weights);
  RouteRequest request{"llama", "", Tokens(8), "", {"w1"}};
  ASSERT_EQ(router.Route(request, "", "a", 0)->worker, "w1");
  Result<RouteDecision> second = router.Route(request, "", "b", 0);
  EXPECT_EQ(second->worker, "");
  EXPECT_EQ(second->candidates[0].reason, "busy");
}

TEST_F(RouterTest, TenantsNeverSeeEachOthersOverlap) {
  std::vector<int64_t> prompt = Tokens(4);
  const std::string salt_a = TenantCacheSalt("secret", "tenant-a");
  const std::string salt_b = TenantCacheSalt("secret", "tenant-b");
  ASSERT_NE(salt_a, salt_b);
  Hold("w1", prompt, 4, ResidencyTier::kHBM, salt_a);
  EXPECT_EQ(Route(prompt, salt_a).worker, "w1");
  EXPECT_EQ(Route(prompt, salt_a).overlap_blocks, 4u);
  RouteDecision other = Route(prompt, salt_b);
  EXPECT_EQ(other.overlap_blocks, 0u);
  EXPECT_EQ(CandidateOf(other, "w1").resident_blocks, 0u);
  EXPECT_EQ(Route(prompt).overlap_blocks, 0u);  // no tenant: unsalted only
  EXPECT_EQ(other.verdict.reason, LookupReason::kCold);
}

TEST_F(RouterTest, TenantSaltIsStableAndSecretBound) {
  EXPECT_EQ(TenantCacheSalt("secret", "t"), TenantCacheSalt("secret", "t"));
  EXPECT_NE(TenantCacheSalt("secret", "t"), TenantCacheSalt("other", "t"));
  EXPECT_EQ(TenantCacheSalt("secret", "t").size(), 32u);
}

class HalfGate : public SpanGate {
 public:
  Limit Creditable(std::string_view, std::span<const index::BlockKey>, size_t resident,
                   int64_t) const override {
    return {resident / 2, LookupKind::kQuarantine, LookupReason::kTaintDenied};
  }
};

TEST_F(RouterTest, GovernanceGateLimitsCredit) {
  HalfGate gate;
  Router router(&index_, &status_, weights_, &gate);
  std::vector<int64_t> prompt = Tokens(4);
  Hold("w1", prompt, 4);
  Result<RouteDecision> decision = router.Route({"llama", "", prompt, "", {"w1"}}, "", "g", 0);
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(decision->candidates[0].resident_blocks, 4u);
  EXPECT_EQ(decision->overlap_blocks, 2u);

  Hold("w2", Tokens(1, 500), 1);
  Result<RouteDecision> gated = router.Route({"llama", "", Tokens(1, 500), "", {"w2"}}, "", "h", 0);
  EXPECT_EQ(gated->overlap_blocks, 0u);
  EXPECT_EQ(gated->verdict.kind, LookupKind::kQuarantine);
  EXPECT_EQ(gated->verdict.reason, LookupReason::kTaintDenied);
}

// A decision's prompt is on its worker from the moment it is routed there,
// for kvgov's purposes: the next request sharing it must not recompute it
// elsewhere only because the engine has not yet said so.
TEST_F(RouterTest, APrefillingDecisionIsCreditedOnItsWorkerUntilItsFirstToken) {
  const std::vector<int64_t> prompt = Tokens(8);
  const RouteDecision first = Route(prompt);
  ASSERT_FALSE(first.worker.empty());
  EXPECT_EQ(first.overlap_blocks, 0u);

  // Five leading blocks shared, three of its own.
  std::vector<int64_t> sibling(prompt.begin(), prompt.begin() + 5 * kBlockSize);
  const std::vector<int64_t> tail = Tokens(3, 9000);
  sibling.insert(sibling.end(), tail.begin(), tail.end());
  Result<RouteDecision> shared = router_.Explain({"llama", "", sibling, "", {}}, "", 1000);
  ASSERT_TRUE(shared.ok());
  const Candidate& there = CandidateOf(*shared, first.worker);
  EXPECT_EQ(there.resident_blocks, 0u);
  EXPECT_EQ(there.overlap_blocks, 5u);
  EXPECT_EQ(there.prefilling_blocks, 5u);
  EXPECT_EQ(there.tier_overlap[0], 5u);
  EXPECT_DOUBLE_EQ(there.credited_blocks, 5.0);
  // No other worker is credited with it.
  for (const Candidate& c : shared->candidates) {
    if (c.worker != first.worker) {
      EXPECT_EQ(c.overlap_blocks, 0u) << c.worker;
    }
  }
  // Sent there, it is a predicted hit.
  Result<RouteDecision> pinned =
      router_.Explain({"llama", "", sibling, "", {first.worker}}, "", 1000);
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(pinned->verdict.kind, LookupKind::kHit);
  EXPECT_EQ(pinned->overlap_blocks, 5u);

  // Resident blocks count once: two on the index, five prefilling.
  Hold(first.worker, prompt, 2);
  Result<RouteDecision> both = router_.Explain({"llama", "", sibling, "", {}}, "", 1000);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(CandidateOf(*both, first.worker).overlap_blocks, 5u);
  EXPECT_EQ(CandidateOf(*both, first.worker).prefilling_blocks, 3u);

  // At its first token the engine's events speak for it.
  ASSERT_TRUE(router_.Prefilled(first.decision_id).ok());
  Result<RouteDecision> after = router_.Explain({"llama", "", sibling, "", {}}, "", 1000);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(CandidateOf(*after, first.worker).overlap_blocks, 2u);
  EXPECT_EQ(CandidateOf(*after, first.worker).prefilling_blocks, 0u);
}

TEST_F(RouterTest, AReleasedDecisionIsNoLongerCreditedAndTheMemoryIsBounded) {
  const std::vector<int64_t> prompt = Tokens(8);
  const RouteDecision first = Route(prompt);
  const RouteDecision second = Route(prompt);  // credited where the first went
  EXPECT_EQ(second.worker, first.worker);
  EXPECT_EQ(second.overlap_blocks, 8u);
  ASSERT_TRUE(router_.Done(first.decision_id).ok());
  // The second still prefills there.
  EXPECT_EQ(CandidateOf(*router_.Explain({"llama", "", prompt, "", {}}, "", 1000), first.worker)
                .prefilling_blocks,
            8u);
  ASSERT_TRUE(router_.Done(second.decision_id).ok());
  EXPECT_EQ(CandidateOf(*router_.Explain({"llama", "", prompt, "", {}}, "", 1000), first.worker)
                .prefilling_blocks,
            0u);

  RouteWeights bounded = weights_;
  bounded.max_prefilling_blocks = 4;  // under one prompt
  Router router(&index_, &status_, bounded);
  ASSERT_TRUE(router.Route({"llama", "", prompt, "", {}}, "", "a", 1000).ok());
  Result<RouteDecision> next = router.Explain({"llama", "", prompt, "", {}}, "", 1000);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->overlap_blocks, 0u);
}

TEST_F(RouterTest, GovernanceGatesPrefillingCreditAsItGatesResidency) {
  HalfGate gate;
  Router router(&index_, &status_, weights_, &gate);
  const std::vector<int64_t> prompt = Tokens(8);
  Result<RouteDecision> first = router.Route({"llama", "", prompt, "", {"w2"}}, "", "p", 0);
  ASSERT_TRUE(first.ok());
  Result<RouteDecision> next = router.Explain({"llama", "", prompt, "", {"w2"}}, "", 0);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->overlap_blocks, 4u);  // half of the eight being prefilled
  EXPECT_EQ(CandidateOf(*next, "w2").prefilling_blocks, 4u);
}

TEST_F(RouterTest, AFullerCacheCostsMoreForWhatItWouldCompute) {
  RouteWeights pressed = weights_;
  pressed.cache_pressure_weight = 3.0;
  Router router(&index_, &status_, pressed);
  Hold("w1", Tokens(100, 100000), 100);  // the fullest
  Hold("w2", Tokens(50, 200000), 50);
  Hold("w2", Tokens(10, 300000), 10, ResidencyTier::kDRAM);  // not where a prefill lands
  const std::vector<int64_t> prompt = Tokens(8);
  Result<RouteDecision> cold = router.Explain({"llama", "", prompt, "", {}}, "", 0);
  ASSERT_TRUE(cold.ok());
  EXPECT_EQ(cold->worker, "w3");
  EXPECT_DOUBLE_EQ(CandidateOf(*cold, "w1").cache_fullness, 1.0);
  EXPECT_DOUBLE_EQ(CandidateOf(*cold, "w2").cache_fullness, 0.5);
  EXPECT_DOUBLE_EQ(CandidateOf(*cold, "w3").cache_fullness, 0.0);
  EXPECT_DOUBLE_EQ(CandidateOf(*cold, "w1").cost, (1.0 + 3.0 * 1.0) * 8);
  EXPECT_DOUBLE_EQ(CandidateOf(*cold, "w2").cost, (1.0 + 3.0 * 0.5) * 8);
  EXPECT_DOUBLE_EQ(CandidateOf(*cold, "w3").cost, 8.0);

  // What a worker holds it need not compute: the full worker holding the
  // prompt pays only for the block it lacks.
  Hold("w1", prompt, 7);
  Result<RouteDecision> warm = router.Explain({"llama", "", prompt, "", {}}, "", 0);
  ASSERT_TRUE(warm.ok());
  EXPECT_EQ(warm->worker, "w1");
  EXPECT_DOUBLE_EQ(CandidateOf(*warm, "w1").cost, (1.0 + 3.0 * 1.0) * 1);
}

TEST_F(RouterTest, TiesBreakDeterministicallyAndTemperatureSamples) {
  EXPECT_EQ(Route(Tokens(4)).worker, "w1");  // all equal: smallest id
  RouteWeights warm;
  warm.temperature = 10;
  warm.seed = 7;
  Router sampler(&index_, &status_, warm);
  std::map<std::string, int> picks;
  for (int i = 0; i < 300; ++i) {
    Result<RouteDecision> d =
        sampler.Route({"llama", "", Tokens(4), "", {}}, "", std::to_string(i), 0);
    ++picks[d->worker];
    ASSERT_TRUE(sampler.Done(std::to_string(i)).ok());
  }
  EXPECT_EQ(picks.size(), 3u);  // equal costs: every worker gets some
  Router again(&index_, &status_, warm);
  EXPECT_EQ(again.Route({"llama", "", Tokens(4), "", {}}, "", "x", 0)->worker,
            Router(&index_, &status_, warm)
                .Route({"llama", "", Tokens(4), "", {}}, "", "x", 0)
                ->worker);  // same seed, same choice
}

TEST_F(RouterTest, DecisionsReleaseThemselvesAfterTheirTtl) {
  Route(Tokens(4), "", {"w1"});
  EXPECT_EQ(router_.LoadOf("w1").in_flight_requests, 1u);
  EXPECT_EQ(router_.ExpireDecisions(1000 + weights_.decision_ttl_ms - 1), 0u);
  EXPECT_EQ(router_.ExpireDecisions(1000 + weights_.decision_ttl_ms), 1u);
  EXPECT_EQ(router_.LoadOf("w1").in_flight_requests, 0u);
}

// Decisions created at different times expire each at its own ttl, and a
// decision released by done is not released again.
TEST_F(RouterTest, DecisionsExpireInTheOrderTheyWereMade) {
  for (int64_t at : {0, 100, 200}) {
    ASSERT_TRUE(
        router_.Route({"llama", "", Tokens(4), "", {"w1"}}, "", "t" + std::to_string(at), at).ok());
  }
  ASSERT_TRUE(router_.Done("t100").ok());
  EXPECT_EQ(router_.LoadOf("w1").in_flight_requests, 2u);
  EXPECT_EQ(router_.ExpireDecisions(weights_.decision_ttl_ms + 150), 1u);  // t0
  EXPECT_EQ(router_.LoadOf("w1").in_flight_requests, 1u);
  EXPECT_EQ(router_.ExpireDecisions(weights_.decision_ttl_ms + 200), 1u);  // t200
  EXPECT_EQ(router_.LoadOf("w1").in_flight_requests, 0u);
  EXPECT_EQ(router_.Done("t0").code(), StatusCode::kNotFound);
}

// Past max_decisions_in_flight the oldest decision is released, counted.
TEST_F(RouterTest, TheOldestDecisionIsReleasedPastTheCap) {
  RouteWeights capped = weights_;
  capped.max_decisions_in_flight = 3;
  Router router(&index_, &status_, capped);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(
        router.Route({"llama", "", Tokens(4), "", {"w1"}}, "", "c" + std::to_string(i), i).ok());
  }
  EXPECT_EQ(router.LoadOf("w1").in_flight_requests, 3u);
  EXPECT_EQ(router.decisions_evicted(), 2u);
  EXPECT_EQ(router.Done("c0").code(), StatusCode::kNotFound);
  EXPECT_EQ(router.Done("c1").code(), StatusCode::kNotFound);
  EXPECT_TRUE(router.Done("c4").ok());
}

TEST_F(RouterTest, UnknownModelAndEmptyModel) {
  EXPECT_EQ(router_.Route({"qwen", "", Tokens(1), "", {}}, "", "z", 0).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(router_.Route({"", "", Tokens(1), "", {}}, "", "z", 0).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(RouterTest, ShortPromptRoutesOnLoadAlone) {
  RouteDecision first = Route({1, 2});
  EXPECT_EQ(first.prompt_blocks, 0u);
  EXPECT_EQ(first.verdict.reason, LookupReason::kCold);
  // The first is still in flight (one block of load): the next goes elsewhere.
  RouteDecision second = Route({3, 4});
  EXPECT_NE(second.worker, first.worker);
}

TEST_F(RouterTest, EqualCostsSpreadColdPrefixesAndKeepEachOnItsWorker) {
  std::set<std::string> chosen;
  for (int64_t i = 0; i < 24; ++i) {
    const std::vector<int64_t> prompt = Tokens(8, 1000 * i);
    RouteDecision decision = Route(prompt);
    ASSERT_TRUE(router_.Done(decision.decision_id).ok());
    chosen.insert(decision.worker);
    // Nothing is resident yet, yet the same prefix is placed alike again.
    RouteDecision again = Route(prompt);
    EXPECT_EQ(again.worker, decision.worker);
    ASSERT_TRUE(router_.Done(again.decision_id).ok());
  }
  EXPECT_EQ(chosen.size(), 3u);
}

}  // namespace
}  // namespace kvgov::router

namespace kvgov::router {
namespace {

// Credit is added block by block in the definition; with credits whose sums
// are exact the route counts blocks per tier instead. Both must agree with
// the definition, bit for bit, with and without a gate cutting the prefix.
TEST_F(RouterTest, CreditIsTheSumOfEachCreditedBlocksTierCredit) {
  std::vector<int64_t> prompt = Tokens(8);
  std::vector<index::BlockKey> chain =
      index::RequestChain(index_.hasher(), {"llama", "", 0}, "", prompt, kBlockSize);
  // w1: blocks 0-2 in hbm, 3-5 in dram (so mixed tiers), block 1 also on disk.
  ASSERT_TRUE(index_.AddBlocks("w1", std::span(chain).first(3), ResidencyTier::kHBM).ok());
  ASSERT_TRUE(index_.AddBlocks("w1", std::span(chain).subspan(3, 3), ResidencyTier::kDRAM).ok());
  ASSERT_TRUE(index_.AddBlocks("w1", std::span(chain).subspan(1, 1), ResidencyTier::kDisk).ok());
  // w2: every block it holds on disk only.
  ASSERT_TRUE(index_.AddBlocks("w2", std::span(chain).first(7), ResidencyTier::kDisk).ok());
  const std::array<uint8_t, 6> w1_tiers = {0, 0, 0, 1, 1, 1};

  for (const auto& credits : {std::array<double, 5>{1.0, 0.75, 0.5, 0.25, 0.0},
                              std::array<double, 5>{0.1, 0.7, 0.3, 0.2, 0.05}}) {
    RouteWeights weights = weights_;
    weights.tier_credit = credits;
    for (bool gated : {false, true}) {
      HalfGate gate;
      Router router(&index_, &status_, weights, gated ? &gate : nullptr);
      Result<RouteDecision> decision = router.Route({"llama", "", prompt, "", {}}, "", "c", 0);
      ASSERT_TRUE(decision.ok());
      const Candidate& w1 = CandidateOf(*decision, "w1");
      const Candidate& w2 = CandidateOf(*decision, "w2");
      const size_t w1_credited = gated ? 3 : 6;
      const size_t w2_credited = gated ? 3 : 7;
      double w1_expected = 0;
      std::array<uint64_t, 5> w1_by_tier{};
      for (size_t i = 0; i < w1_credited; ++i) {
        w1_expected += credits[w1_tiers[i]];
        ++w1_by_tier[w1_tiers[i]];
      }
      double w2_expected = 0;
      for (size_t i = 0; i < w2_credited; ++i) w2_expected += credits[2];
      SCOPED_TRACE(std::string(gated ? "gated" : "ungated") + ", hbm credit " +
                   std::to_string(credits[0]));
      EXPECT_EQ(w1.resident_blocks, 6u);
      EXPECT_EQ(w1.overlap_blocks, w1_credited);
      EXPECT_EQ(w1.tier_overlap, w1_by_tier);
      EXPECT_EQ(w1.credited_blocks, w1_expected);  // exactly, not nearly
      EXPECT_EQ(w2.overlap_blocks, w2_credited);
      EXPECT_EQ(w2.tier_overlap, (std::array<uint64_t, 5>{0, 0, w2_credited, 0, 0}));
      EXPECT_EQ(w2.credited_blocks, w2_expected);
      EXPECT_EQ(w1.cost, weights.overlap_weight * (8 - w1_expected));
    }
  }
}

TEST_F(RouterTest, CandidatesAreRankedEligibleByCostThenIneligibleById) {
  for (const char* id : {"w0", "w4", "w5"}) {
    ASSERT_TRUE(index_.AddWorker(id, "llama", kBlockSize).ok());
    ASSERT_TRUE(status_.Add(id, /*probed=*/false).ok());
  }
  std::vector<int64_t> prompt = Tokens(6);
  Hold("w3", prompt, 2);
  Hold("w1", prompt, 5);
  Hold("w4", prompt, 6);
  ASSERT_TRUE(status_.SetDraining("w4", true).ok());
  ASSERT_TRUE(status_.SetDraining("w0", true).ok());
  RouteDecision decision = Route(prompt);
  std::vector<std::string> order;
  for (const Candidate& c : decision.candidates) order.push_back(c.worker);
  ASSERT_EQ(order.size(), 6u);
  EXPECT_EQ(std::vector<std::string>(order.begin(), order.begin() + 2),
            (std::vector<std::string>{"w1", "w3"}));
  // The two cold eligible workers tie on everything but affinity.
  std::vector<std::string> cold(order.begin() + 2, order.begin() + 4);
  std::sort(cold.begin(), cold.end());
  EXPECT_EQ(cold, (std::vector<std::string>{"w2", "w5"}));
  EXPECT_EQ(std::vector<std::string>(order.begin() + 4, order.end()),
            (std::vector<std::string>{"w0", "w4"}));
  EXPECT_EQ(decision.worker, "w1");
}

TEST(WorkerStatusTableTest, RouteStatusesFollowTheGivenOrder) {
  WorkerStatusTable table;
  ASSERT_TRUE(table.Add("a", false).ok());
  ASSERT_TRUE(table.Add("b", true).ok());
  ASSERT_TRUE(table.Add("c", false).ok());
  ASSERT_TRUE(table.SetDraining("c", true).ok());
  ASSERT_TRUE(table.RecordScrape("a", {1, 2, 0.5, 7}).ok());
  ASSERT_TRUE(table.RecordProbe("b", false, 5, "refused").ok());
  for (const std::vector<std::string_view>& ids :
       {std::vector<std::string_view>{"a", "b", "c", "d"},
        std::vector<std::string_view>{"d", "c", "a", "b", "a"}}) {
    std::vector<std::optional<RouteStatus>> got = table.RouteStatuses(ids);
    ASSERT_EQ(got.size(), ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      std::optional<WorkerStatus> full = table.Get(ids[i]);
      ASSERT_EQ(got[i].has_value(), full.has_value()) << ids[i];
      if (!full) continue;
      EXPECT_EQ(got[i]->healthy, full->healthy) << ids[i];
      EXPECT_EQ(got[i]->draining, full->draining) << ids[i];
      EXPECT_EQ(got[i]->scraped, full->scraped) << ids[i];
    }
  }
  EXPECT_TRUE(table.RouteStatuses({}).empty());
}

}  // namespace
}  // namespace kvgov::router
