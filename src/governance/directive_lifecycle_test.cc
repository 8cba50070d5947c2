#include "kvgov/governance/directive_lifecycle.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace kvgov::governance {
namespace {

constexpr int64_t kTimeoutMs = 30'000;
constexpr int64_t kNowMs = 1'764'576'000'000;
const std::vector<index::BlockKey> kSpan = {11, 12, 13};

const DirectiveLifecycle kLifecycle(kTimeoutMs);

DirectiveDraft Draft(std::vector<OwnerProgress> owners) {
  DirectiveDraft draft;
  draft.id = "0123456789abcdef0123456789abcdef";
  draft.reason = "poisoned_kv";
  draft.model = "llama";
  draft.subject = DirectiveSubject("llama", "", "", kSpan);
  draft.owners = std::move(owners);
  return draft;
}

// One owner, w1, holding the whole span.
Directive Planned() { return kLifecycle.Plan(Draft({OwnerOfKeys("w1", kSpan)}), kNowMs).directive; }

CallAnswered Answer(size_t owner) {
  return {owner, "vllm", 1, 200, KVEvictionScope::kExactSpan, false, ""};
}

// Drives `d` through `events`, each at kNowMs + 1.
Directive After(Directive d, const std::vector<DirectiveEvent>& events) {
  for (const DirectiveEvent& event : events) kLifecycle.Apply(d, event, kNowMs + 1);
  return d;
}

// A directive in each state, each reached by the events a driver sends.
Directive InState(DirectiveState state) {
  const Directive planned = Planned();
  switch (state) {
    case DirectiveState::kPlanned:
      return planned;
    case DirectiveState::kDispatched:
      return After(planned, {CallStarted{0, 4}});
    case DirectiveState::kAcknowledged:
      return After(planned, {CallStarted{0, 4}, Answer(0), CallsEnded{}});
    case DirectiveState::kWitnessed:
      return After(planned,
                   {CallStarted{0, 4}, Answer(0), CallsEnded{}, RemovalSeen{"w1", 5, kSpan}});
    case DirectiveState::kCertified:
      return After(InState(DirectiveState::kWitnessed), {Certified{"cert-1"}});
    case DirectiveState::kFailed:
      return After(planned,
                   {CallStarted{0, 4}, CallFailed{0, "vllm", "connection refused"}, CallsEnded{}});
  }
  return planned;
}

// Every event kind, with arguments that apply wherever the event can.
struct NamedEvent {
  const char* name;
  DirectiveEvent event;
  int64_t now_ms;
};
std::vector<NamedEvent> EveryEvent() {
  return {{"CallStarted", CallStarted{0, 7}, kNowMs + 1},
          {"CallAnswered", Answer(0), kNowMs + 1},
          {"CallFailed", CallFailed{0, "vllm", "503"}, kNowMs + 1},
          {"CallsEnded", CallsEnded{}, kNowMs + 1},
          {"RemovalSeen", RemovalSeen{"w1", 9, kSpan}, kNowMs + 1},
          {"ClearSeen", ClearSeen{"w1", 9}, kNowMs + 1},
          {"RestartSeen", RestartSeen{"w1", 0}, kNowMs + 1},
          {"Tick", Tick{}, kNowMs + kTimeoutMs},
          {"Certified", Certified{"cert-2"}, kNowMs + 1},
          {"DriverResumed", DriverResumed{}, kNowMs + 1}};
}

// The whole transition table: for every state and every event, the state
// after it ("" where the event changes nothing at all and asks for
// nothing) and the effects it asks for.
struct Row {
  DirectiveState from;
  const char* event;
  const char* to;  // "" = no change, no effects
  bool journal = false;
  bool certify = false;
  bool call = false;
  bool release = false;
};

const Row kTable[] = {
    // planned: only a call, or a resumed driver's call, moves it.
    {DirectiveState::kPlanned, "CallStarted", "dispatched"},
    {DirectiveState::kPlanned, "CallAnswered", ""},
    {DirectiveState::kPlanned, "CallFailed", ""},
    {DirectiveState::kPlanned, "CallsEnded", ""},
    {DirectiveState::kPlanned, "RemovalSeen", ""},  // nothing was asked yet: no proof
    {DirectiveState::kPlanned, "ClearSeen", ""},
    {DirectiveState::kPlanned, "RestartSeen", ""},  // nothing was asked of the old process
    {DirectiveState::kPlanned, "Tick", ""},
    {DirectiveState::kPlanned, "Certified", ""},
    {DirectiveState::kPlanned, "DriverResumed", "planned", false, false, /*call=*/true},
    // dispatched: the call is out.
    {DirectiveState::kDispatched, "CallStarted", "dispatched"},  // called again: newer seq
    {DirectiveState::kDispatched, "CallAnswered", "dispatched"},
    {DirectiveState::kDispatched, "CallFailed", "dispatched"},
    {DirectiveState::kDispatched, "CallsEnded", "acknowledged", /*journal=*/true},
    {DirectiveState::kDispatched, "RemovalSeen", "witnessed", false, /*certify=*/true, false,
     /*release=*/true},
    {DirectiveState::kDispatched, "ClearSeen", "witnessed", false, true, false, true},
    // A restart's first batch counts from 0, below the call's seq, and still witnesses.
    {DirectiveState::kDispatched, "RestartSeen", "witnessed", false, true, false, true},
    {DirectiveState::kDispatched, "Tick", "failed", /*journal=*/true},
    {DirectiveState::kDispatched, "Certified", ""},
    {DirectiveState::kDispatched, "DriverResumed", "dispatched", false, false, /*call=*/true},
    // acknowledged: waiting for the witness.
    {DirectiveState::kAcknowledged, "CallStarted", ""},
    {DirectiveState::kAcknowledged, "CallAnswered", ""},
    {DirectiveState::kAcknowledged, "CallFailed", ""},
    {DirectiveState::kAcknowledged, "CallsEnded", ""},
    {DirectiveState::kAcknowledged, "RemovalSeen", "witnessed", false, true, false, true},
    {DirectiveState::kAcknowledged, "ClearSeen", "witnessed", false, true, false, true},
    {DirectiveState::kAcknowledged, "RestartSeen", "witnessed", false, true, false, true},
    {DirectiveState::kAcknowledged, "Tick", "failed", true},
    {DirectiveState::kAcknowledged, "Certified", ""},
    {DirectiveState::kAcknowledged, "DriverResumed", "acknowledged"},  // a fresh deadline only
    // witnessed: only the certificate moves it.
    {DirectiveState::kWitnessed, "CallStarted", ""},
    {DirectiveState::kWitnessed, "CallAnswered", ""},
    {DirectiveState::kWitnessed, "CallFailed", ""},
    {DirectiveState::kWitnessed, "CallsEnded", ""},
    {DirectiveState::kWitnessed, "RemovalSeen", ""},
    {DirectiveState::kWitnessed, "ClearSeen", ""},
    {DirectiveState::kWitnessed, "RestartSeen", ""},
    {DirectiveState::kWitnessed, "Tick", ""},  // seen gone: no timeout
    {DirectiveState::kWitnessed, "Certified", "certified"},
    {DirectiveState::kWitnessed, "DriverResumed", "witnessed", false, /*certify=*/true},
};

DirectiveState Parse(const char* state) { return *ParseEnum<DirectiveState>(state); }

TEST(DirectiveLifecycleTest, EveryStateUnderEveryEventFollowsTheTable) {
  for (const auto& [state, spelling] : EnumSpelling<DirectiveState>::kValues) {
    ASSERT_EQ(InState(state).state, state) << spelling;
  }
  size_t checked = 0;
  for (const NamedEvent& named : EveryEvent()) {
    for (const auto& [state, spelling] : EnumSpelling<DirectiveState>::kValues) {
      SCOPED_TRACE(std::string(spelling) + " + " + named.name);
      const Directive before = InState(state);
      Directive after = before;
      const DirectiveEffects effects = kLifecycle.Apply(after, named.event, named.now_ms);
      const Row* row = nullptr;
      for (const Row& r : kTable) {
        if (r.from == state && std::string(r.event) == named.name) row = &r;
      }
      ++checked;
      if (IsFinished(state)) {
        // Finished is final: nothing changes, nothing is asked.
        EXPECT_EQ(row, nullptr) << "the table lists a finished state";
        EXPECT_EQ(after, before);
        EXPECT_TRUE(effects.empty());
        continue;
      }
      ASSERT_NE(row, nullptr) << "missing from the table";
      if (std::string(row->to).empty()) {
        EXPECT_EQ(after, before);
        EXPECT_TRUE(effects.empty());
        continue;
      }
      EXPECT_NE(after, before);
      EXPECT_EQ(after.state, Parse(row->to));
      EXPECT_EQ(effects.journal.has_value(), row->journal);
      if (effects.journal) {
        EXPECT_EQ(*effects.journal, "invalidation." + std::string(row->to));
      }
      EXPECT_EQ(effects.certify, row->certify);
      EXPECT_EQ(!effects.call.empty(), row->call);
      EXPECT_EQ(!effects.release.empty(), row->release);
      EXPECT_TRUE(effects.hold.empty()) << "only Plan holds targets";
    }
  }
  EXPECT_EQ(checked, EveryEvent().size() * EnumSpelling<DirectiveState>::kValues.size());
}

TEST(DirectiveLifecycleTest, PlanningHoldsEveryTargetJournalsAndCallsEveryOwner) {
  DirectiveLifecycle::Planned planned = kLifecycle.Plan(
      Draft({OwnerOfKeys("w1", kSpan), OwnerOfKeys("w2", std::span(kSpan).first(1))}), kNowMs);
  const Directive& d = planned.directive;
  EXPECT_EQ(d.state, DirectiveState::kPlanned);
  EXPECT_EQ(d.target_count, 4u);
  EXPECT_EQ(d.created_ms, kNowMs);
  EXPECT_EQ(d.deadline_ms, kNowMs + kTimeoutMs);
  EXPECT_EQ(planned.effects.journal, "invalidation.planned");
  EXPECT_EQ(planned.effects.call, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(planned.effects.hold,
            (std::vector<WorkerTargets>{{"w1", {11, 12, 13}, false}, {"w2", {11}, false}}));
  EXPECT_FALSE(planned.effects.certify);
}

// The referee: nothing is ever dispatched, or certified, for zero targets.
TEST(DirectiveLifecycleTest, TheRefereeDeniesADirectiveWithoutAResidentTarget) {
  index::WorkerResidency empty_worker{"w1", "llama", 16, index::WorkerState::kLive, {}};
  for (const std::vector<OwnerProgress>& owners :
       {std::vector<OwnerProgress>{}, OwnersOfWorkers(std::span(&empty_worker, 1)),
        std::vector<OwnerProgress>{OwnerOfKeys("w1", {})}}) {
    DirectiveLifecycle::Planned planned = kLifecycle.Plan(Draft(owners), kNowMs);
    EXPECT_EQ(planned.directive.state, DirectiveState::kFailed);
    EXPECT_EQ(planned.directive.failure, "referee_denied: no resident target");
    EXPECT_EQ(planned.effects.journal, "invalidation.planned");  // the request is on record
    EXPECT_TRUE(planned.effects.call.empty());
    EXPECT_TRUE(planned.effects.hold.empty());
  }
}

// Only what the engine published after kvgov's call is proof.
TEST(DirectiveLifecycleTest, ARemovalAtOrBeforeTheCallsSeqIsNoWitness) {
  Directive d = After(Planned(), {CallStarted{0, 40}, Answer(0), CallsEnded{}});
  for (uint64_t seq : {39u, 40u}) {
    Directive copy = d;
    EXPECT_TRUE(kLifecycle.Apply(copy, RemovalSeen{"w1", seq, kSpan}, kNowMs).empty());
    EXPECT_TRUE(kLifecycle.Apply(copy, ClearSeen{"w1", seq}, kNowMs).empty());
    EXPECT_EQ(copy, d);
  }
  EXPECT_TRUE(kLifecycle.Apply(d, RemovalSeen{"w1", 41, kSpan}, kNowMs).certify);
  EXPECT_EQ(d.owners[0].witness_seqs, (std::vector<uint64_t>{41}));
  EXPECT_EQ(d.owners[0].witness_kind, WitnessKind::kBlockRemoved);
}

TEST(DirectiveLifecycleTest, RemovalsOnAnotherWorkerOrOfOtherBlocksWitnessNothing) {
  const Directive d = InState(DirectiveState::kAcknowledged);
  Directive copy = d;
  EXPECT_TRUE(kLifecycle.Apply(copy, RemovalSeen{"w2", 9, kSpan}, kNowMs).empty());
  EXPECT_TRUE(kLifecycle.Apply(copy, ClearSeen{"w2", 9}, kNowMs).empty());
  EXPECT_TRUE(kLifecycle.Apply(copy, RemovalSeen{"w1", 9, {99}}, kNowMs).empty());
  EXPECT_EQ(copy, d);
}

// Each removal gives credit back for exactly what it shows; the directive
// is witnessed with the last target.
TEST(DirectiveLifecycleTest, PartialRemovalsReleaseWhatTheyShowAndWitnessWithTheLast) {
  Directive d = InState(DirectiveState::kAcknowledged);
  DirectiveEffects first = kLifecycle.Apply(d, RemovalSeen{"w1", 5, {12, 99}}, kNowMs);
  EXPECT_EQ(first.release, (std::vector<WorkerTargets>{{"w1", {12}, false}}));
  EXPECT_FALSE(first.certify);
  EXPECT_EQ(d.state, DirectiveState::kAcknowledged);
  EXPECT_EQ(d.owners[0].pending, (std::set<index::BlockKey>{11, 13}));
  DirectiveEffects last = kLifecycle.Apply(d, RemovalSeen{"w1", 6, {11, 13}}, kNowMs);
  EXPECT_EQ(last.release, (std::vector<WorkerTargets>{{"w1", {11, 13}, false}}));
  EXPECT_TRUE(last.certify);
  EXPECT_EQ(d.state, DirectiveState::kWitnessed);
  EXPECT_EQ(d.owners[0].witness_seqs, (std::vector<uint64_t>{5, 6}));
}

// A whole worker's cache is witnessed only by a clear; removals of single
// blocks prove nothing about the rest.
TEST(DirectiveLifecycleTest, AWholeWorkerIsWitnessedOnlyByAClear) {
  index::WorkerResidency worker{"w1", "llama", 16, index::WorkerState::kLive, {}};
  worker.blocks[0] = 500;
  Directive d =
      After(kLifecycle.Plan(Draft(OwnersOfWorkers(std::span(&worker, 1))), kNowMs).directive,
            {CallStarted{0, 4}, Answer(0), CallsEnded{}});
  ASSERT_EQ(d.state, DirectiveState::kAcknowledged);
  EXPECT_EQ(d.target_count, 500u);
  EXPECT_TRUE(kLifecycle.Apply(d, RemovalSeen{"w1", 5, kSpan}, kNowMs).empty());
  DirectiveEffects cleared = kLifecycle.Apply(d, ClearSeen{"w1", 6}, kNowMs);
  EXPECT_EQ(cleared.release, (std::vector<WorkerTargets>{{"w1", {}, true}}));
  EXPECT_TRUE(cleared.certify);
  EXPECT_EQ(d.owners[0].witness_kind, WitnessKind::kAllBlocksCleared);
  EXPECT_FALSE(d.owners[0].whole_worker);
}

// An engine that restarts after kvgov's flush call (issue 41): its cleared
// cache witnesses the whole-worker directive, though the new process's
// batches count from 0, below the seq the call was made at.
TEST(DirectiveLifecycleTest, AnEngineRestartAfterTheCallWitnessesItDespiteItsSmallerSeqs) {
  index::WorkerResidency worker{"w1", "llama", 16, index::WorkerState::kLive, {}};
  worker.blocks[0] = 500;
  Directive d =
      After(kLifecycle.Plan(Draft(OwnersOfWorkers(std::span(&worker, 1))), kNowMs).directive,
            {CallStarted{0, 40}, Answer(0), CallsEnded{}});
  ASSERT_EQ(d.state, DirectiveState::kAcknowledged);
  EXPECT_TRUE(kLifecycle.Apply(d, ClearSeen{"w1", 3}, kNowMs).empty());  // an old batch
  DirectiveEffects restarted = kLifecycle.Apply(d, RestartSeen{"w1", 0}, kNowMs);
  EXPECT_EQ(restarted.release, (std::vector<WorkerTargets>{{"w1", {}, true}}));
  EXPECT_TRUE(restarted.certify);
  EXPECT_EQ(d.state, DirectiveState::kWitnessed);
  EXPECT_EQ(d.owners[0].witness_kind, WitnessKind::kEngineRestart);
  EXPECT_EQ(d.owners[0].witness_seqs, (std::vector<uint64_t>{0}));

  // A restart on another worker witnesses nothing here.
  Directive other =
      After(kLifecycle.Plan(Draft(OwnersOfWorkers(std::span(&worker, 1))), kNowMs).directive,
            {CallStarted{0, 40}, Answer(0), CallsEnded{}});
  EXPECT_TRUE(kLifecycle.Apply(other, RestartSeen{"w9", 0}, kNowMs).empty());
  EXPECT_EQ(other.owners[0].dispatch_seq, 40);
}

// The engine may publish the removal before its HTTP answer arrives: the
// answer is still recorded, and does not take the witness back.
TEST(DirectiveLifecycleTest, AWitnessBeforeTheAnswerStands) {
  Directive d = After(Planned(), {CallStarted{0, 4}, RemovalSeen{"w1", 5, kSpan}});
  ASSERT_EQ(d.state, DirectiveState::kWitnessed);
  EXPECT_TRUE(kLifecycle.Apply(d, Answer(0), kNowMs).empty());
  EXPECT_EQ(d.owners[0].state, OwnerState::kWitnessed);
  EXPECT_EQ(d.owners[0].last_status, 200);
  EXPECT_EQ(d.owners[0].scope, KVEvictionScope::kExactSpan);
  const Directive answered = d;
  EXPECT_TRUE(kLifecycle.Apply(d, Answer(0), kNowMs).empty());  // once only
  EXPECT_EQ(d, answered);
  // The round's end journals nothing: the certify step journals the anchor.
  EXPECT_TRUE(kLifecycle.Apply(d, CallsEnded{}, kNowMs).empty());
  EXPECT_EQ(d.state, DirectiveState::kWitnessed);
}

TEST(DirectiveLifecycleTest, TwoOwnersAreWitnessedOnlyWhenBothAre) {
  Directive d =
      After(kLifecycle.Plan(Draft({OwnerOfKeys("w1", kSpan), OwnerOfKeys("w2", kSpan)}), kNowMs)
                .directive,
            {CallStarted{0, 4}, Answer(0), CallStarted{1, 8}, Answer(1), CallsEnded{}});
  EXPECT_FALSE(kLifecycle.Apply(d, RemovalSeen{"w1", 5, kSpan}, kNowMs).certify);
  EXPECT_EQ(d.owners[0].state, OwnerState::kWitnessed);
  EXPECT_EQ(d.state, DirectiveState::kAcknowledged);
  EXPECT_TRUE(kLifecycle.Apply(d, ClearSeen{"w2", 9}, kNowMs).certify);
  EXPECT_EQ(d.state, DirectiveState::kWitnessed);
}

TEST(DirectiveLifecycleTest, OneUnreachableOwnerFailsTheDirectiveAtTheRoundsEnd) {
  Directive d =
      After(kLifecycle.Plan(Draft({OwnerOfKeys("w1", kSpan), OwnerOfKeys("w2", kSpan)}), kNowMs)
                .directive,
            {CallStarted{0, 4}, Answer(0), CallStarted{1, 8},
             CallFailed{1, "", "worker 'w2' has no control URL to send a directive to"}});
  EXPECT_EQ(d.state, DirectiveState::kDispatched);
  EXPECT_EQ(d.owners[1].state, OwnerState::kFailed);
  EXPECT_EQ(kLifecycle.Apply(d, CallsEnded{}, kNowMs).journal, "invalidation.failed");
  EXPECT_EQ(d.state, DirectiveState::kFailed);
  EXPECT_EQ(d.failure, "owner_unreachable");
}

// A timeout keeps the targets held: nobody saw them go.
TEST(DirectiveLifecycleTest, TheDeadlineFailsAnUnwitnessedDirectiveAndKeepsItsTargetsHeld) {
  Directive d = InState(DirectiveState::kAcknowledged);
  EXPECT_TRUE(kLifecycle.Apply(d, Tick{}, d.deadline_ms - 1).empty());
  DirectiveEffects effects = kLifecycle.Apply(d, Tick{}, d.deadline_ms);
  EXPECT_EQ(effects.journal, "invalidation.failed");
  EXPECT_TRUE(effects.release.empty());
  EXPECT_EQ(d.failure, "witness_timeout");
  EXPECT_EQ(PendingTargets(d), (std::vector<WorkerTargets>{{"w1", {11, 12, 13}, false}}));
}

// A call whose answer the driver lost (a crash, a lost claim) is made again
// by the next driver, within a fresh deadline; attempts add up.
TEST(DirectiveLifecycleTest, AResumedDriverCallsOnlyUnansweredOwnersWithinAFreshDeadline) {
  Directive d =
      After(kLifecycle.Plan(Draft({OwnerOfKeys("w1", kSpan), OwnerOfKeys("w2", kSpan)}), kNowMs)
                .directive,
            {CallStarted{0, 4}, Answer(0), CallStarted{1, 8}});
  const int64_t later = kNowMs + 2 * kTimeoutMs;
  DirectiveEffects effects = kLifecycle.Apply(d, DriverResumed{}, later);
  EXPECT_EQ(effects.call, (std::vector<size_t>{1}));
  EXPECT_EQ(d.deadline_ms, later + kTimeoutMs);
  // A deadline already later than that is kept.
  d.deadline_ms = later + 2 * kTimeoutMs;
  kLifecycle.Apply(d, DriverResumed{}, later);
  EXPECT_EQ(d.deadline_ms, later + 2 * kTimeoutMs);
  EXPECT_TRUE(MayCall(d, 1));
  EXPECT_FALSE(MayCall(d, 0));
  EXPECT_FALSE(MayCall(d, 2));
  kLifecycle.Apply(d, Answer(1), later);
  kLifecycle.Apply(d, CallStarted{0, 9}, later);  // answered already: not called again
  kLifecycle.Apply(d, Answer(0), later);
  EXPECT_EQ(d.owners[0].attempts, 1);
  EXPECT_EQ(d.owners[0].dispatch_seq, 4);
  EXPECT_EQ(d.owners[1].attempts, 1);
}

TEST(DirectiveLifecycleTest, EventsNamingNoOwnerChangeNothing) {
  const Directive d = InState(DirectiveState::kDispatched);
  for (DirectiveEvent event : {DirectiveEvent(CallStarted{1, 9}), DirectiveEvent(Answer(1)),
                               DirectiveEvent(CallFailed{7, "", "x"})}) {
    Directive copy = d;
    EXPECT_TRUE(kLifecycle.Apply(copy, event, kNowMs).empty());
    EXPECT_EQ(copy, d);
  }
}

TEST(DirectiveLifecycleTest, OwnersOfASpanOwnTheLeadingPartEachHolds) {
  std::vector<index::WorkerOverlap> holders(2);
  holders[0].worker = "w1";
  holders[0].blocks = 3;
  holders[1].worker = "w2";
  holders[1].blocks = 1;
  std::vector<OwnerProgress> owners = OwnersOfSpan(kSpan, holders);
  ASSERT_EQ(owners.size(), 2u);
  EXPECT_EQ(owners[0].pending, (std::set<index::BlockKey>{11, 12, 13}));
  EXPECT_EQ(owners[1].pending, (std::set<index::BlockKey>{11}));
  EXPECT_EQ(owners[1].target_count, 1u);
}

TEST(DirectiveLifecycleTest, TheSubjectNamesModelScopeWorkerAndSpan) {
  const std::string subject = DirectiveSubject("llama", "", "", kSpan);
  EXPECT_EQ(subject.size(), 64u);
  EXPECT_EQ(subject, DirectiveSubject("llama", "", "", kSpan));
  EXPECT_NE(subject, DirectiveSubject("llama", "", "", std::span(kSpan).first(2)));
  EXPECT_NE(subject, DirectiveSubject("qwen", "", "", kSpan));
  EXPECT_NE(DirectiveSubject("llama", "worker", "w1", {}),
            DirectiveSubject("llama", "worker", "w2", {}));
  EXPECT_NE(DirectiveSubject("llama", "model", "", {}), DirectiveSubject("llama", "", "", {}));
}

// A tenant revocation: owners are the workers holding residue of the
// tenant's revoked salts; it needs no call unless a flush was asked for.
DirectiveDraft RevocationDraft(std::vector<std::pair<std::string, uint64_t>> residue, bool flush) {
  DirectiveDraft draft = Draft({});
  draft.tenant = "acme";
  draft.model = "";
  draft.revocation = Revocation{1, 0, kNowMs, flush, 0};
  draft.subject = RevocationSubject("", "acme", *draft.revocation);
  for (const auto& [worker, blocks] : residue) {
    OwnerProgress owner;
    owner.worker = worker;
    owner.residue = blocks;
    owner.target_count = blocks;
    draft.owners.push_back(owner);
  }
  return draft;
}

TEST(DirectiveLifecycleTest, ARevocationWithoutFlushWaitsForTheResidueToGo) {
  DirectiveLifecycle::Planned planned =
      kLifecycle.Plan(RevocationDraft({{"w1", 5}, {"w2", 2}}, false), kNowMs);
  Directive& d = planned.directive;
  EXPECT_EQ(d.state, DirectiveState::kAcknowledged);  // the epoch is in force
  EXPECT_TRUE(planned.effects.call.empty());
  EXPECT_TRUE(planned.effects.hold.empty());  // old keys earn no credit anyway
  EXPECT_EQ(d.target_count, 7u);
  EXPECT_EQ(d.deadline_ms, 0);
  EXPECT_FALSE(MayCall(d, 0));
  // Removals and clears do not witness it: only the residue count does.
  EXPECT_TRUE(kLifecycle.Apply(d, RemovalSeen{"w1", 9, {11}}, kNowMs + 1).empty());
  kLifecycle.Apply(d, ClearSeen{"w1", 10}, kNowMs + 1);
  EXPECT_EQ(d.owners[0].state, OwnerState::kPlanned);
  // No deadline: a day later it still waits.
  EXPECT_TRUE(kLifecycle.Apply(d, Tick{}, kNowMs + 86'400'000).empty());
  EXPECT_EQ(d.state, DirectiveState::kAcknowledged);
  EXPECT_TRUE(kLifecycle.Apply(d, DriverResumed{}, kNowMs + 2).call.empty());
  // Unattributed blocks count as residue: fail-closed.
  EXPECT_FALSE(kLifecycle.Apply(d, ResidueSeen{"w1", 0, 3}, kNowMs + 3).certify);
  EXPECT_EQ(d.owners[0].unattributed, 3u);
  EXPECT_NE(d.owners[0].state, OwnerState::kWitnessed);
  EXPECT_FALSE(kLifecycle.Apply(d, ResidueSeen{"w1", 0, 0}, kNowMs + 4).certify);
  EXPECT_EQ(d.owners[0].state, OwnerState::kWitnessed);
  EXPECT_FALSE(kLifecycle.Apply(d, ResidueSeen{"w2", 1, 0}, kNowMs + 5).certify);
  EXPECT_EQ(d.owners[1].residue, 1u);
  const DirectiveEffects gone = kLifecycle.Apply(d, ResidueSeen{"w2", 0, 0}, kNowMs + 6);
  EXPECT_TRUE(gone.certify);
  EXPECT_EQ(d.state, DirectiveState::kWitnessed);
  EXPECT_EQ(d.revocation->removed_by_ms, kNowMs + 6);
  EXPECT_EQ(d.revocation->unreachable_since_ms, kNowMs);
}

TEST(DirectiveLifecycleTest, ARevocationWithNothingResidentIsWitnessedAtOnce) {
  DirectiveLifecycle::Planned planned = kLifecycle.Plan(RevocationDraft({}, false), kNowMs);
  EXPECT_EQ(planned.directive.state, DirectiveState::kWitnessed);
  EXPECT_TRUE(planned.effects.certify);
  EXPECT_EQ(planned.effects.journal, "invalidation.planned");
  EXPECT_EQ(planned.directive.revocation->removed_by_ms, kNowMs);
  EXPECT_TRUE(planned.directive.failure.empty());
}

TEST(DirectiveLifecycleTest, AFlushedRevocationCountsOnlyWhatGoesAfterTheCall) {
  DirectiveLifecycle::Planned planned = kLifecycle.Plan(RevocationDraft({{"w1", 4}}, true), kNowMs);
  Directive& d = planned.directive;
  EXPECT_EQ(d.state, DirectiveState::kPlanned);
  EXPECT_EQ(planned.effects.call, (std::vector<size_t>{0}));
  EXPECT_EQ(d.deadline_ms, kNowMs + kTimeoutMs);
  // Before the call, a zero count proves nothing about the flush.
  EXPECT_FALSE(kLifecycle.Apply(d, ResidueSeen{"w1", 0, 0}, kNowMs + 1).certify);
  EXPECT_EQ(d.owners[0].state, OwnerState::kPlanned);
  d = After(d,
            {CallStarted{0, 7}, Answer(0), CallsEnded{}, ClearSeen{"w1", 6}, ClearSeen{"w1", 8}});
  EXPECT_EQ(d.state, DirectiveState::kAcknowledged);
  EXPECT_EQ(d.owners[0].witness_seqs, (std::vector<uint64_t>{8}));
  EXPECT_EQ(d.owners[0].witness_kind, WitnessKind::kAllBlocksCleared);
  EXPECT_TRUE(kLifecycle.Apply(d, ResidueSeen{"w1", 0, 0}, kNowMs + 2).certify);
  EXPECT_EQ(d.state, DirectiveState::kWitnessed);
  // A flush that never shows fails at the deadline, like any directive.
  Directive late = kLifecycle.Plan(RevocationDraft({{"w1", 4}}, true), kNowMs).directive;
  late = After(late, {CallStarted{0, 7}, Answer(0), CallsEnded{}});
  kLifecycle.Apply(late, Tick{}, kNowMs + kTimeoutMs);
  EXPECT_EQ(late.state, DirectiveState::kFailed);
  EXPECT_EQ(late.failure, "witness_timeout");
}

TEST(DirectiveLifecycleTest, TheRevocationSubjectNamesModelTenantAndEpochs) {
  const Revocation first{1, 0, 0, false, 0};
  const Revocation second{2, 0, 0, false, 0};
  EXPECT_EQ(RevocationSubject("", "acme", first).size(), 64u);
  EXPECT_NE(RevocationSubject("", "acme", first), RevocationSubject("", "acme", second));
  EXPECT_NE(RevocationSubject("", "acme", first), RevocationSubject("", "other", first));
  EXPECT_NE(RevocationSubject("", "acme", first), RevocationSubject("llama", "acme", first));
}

}  // namespace
}  // namespace kvgov::governance
