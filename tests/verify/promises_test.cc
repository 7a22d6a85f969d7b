// The scheduling promises (docs/scheduling.md) on generated histories: the regressions the
// generator found (shrunk), each property failing when the engine is broken on purpose in the
// way it guards against (quota::EngineOptions::Break), and the quick set of histories.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>

#include "sim/histories.h"
#include "sim/scenario.h"

namespace tessera::sim {
namespace {

using Break = quota::EngineOptions::Break;

std::string Dir() { return std::string(TESSERA_SOURCE_DIR) + "/tests/sim/histories"; }

bool Has(const std::vector<verify::Violation>& v, const std::string& property) {
  return std::any_of(v.begin(), v.end(),
                     [&](const verify::Violation& x) { return x.property == property; });
}

// Every scenario the generator once found breaking a promise, shrunk, holds them all now.
TEST(PromiseRegressions, EveryShrunkHistoryHoldsEveryPromise) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(Dir())) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    auto s = LoadScenario(entry.path().string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto r = RunHistory(*s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (const verify::Violation& v : r->violations)
      ADD_FAILURE() << entry.path().filename() << ": " << v.ToString();
  }
  EXPECT_GT(files, 0);
}

// The first seed in 1..limit whose history, with the engine broken by `b`, breaks `property`;
// 0 when none does.
uint64_t FirstBreaking(Break b, const std::string& property, uint64_t limit) {
  RunOptions o;
  o.engine_break = b;
  for (uint64_t seed = 1; seed <= limit; ++seed) {
    auto r = RunHistory(GenerateHistory(seed), o);
    if (r.ok() && Has(r->violations, property)) return seed;
  }
  return 0;
}

struct BreakCase {
  Break engine_break;
  const char* property;
  const char* what;  // the break, in words
};

class PropertyCatchesItsBreak : public ::testing::TestWithParam<BreakCase> {};

// Each property fails when the engine is broken in the way it guards against, and the same
// history holds it with the engine whole.
TEST_P(PropertyCatchesItsBreak, OnAGeneratedHistoryAndNotWithoutTheBreak) {
  const BreakCase& c = GetParam();
  const uint64_t seed = FirstBreaking(c.engine_break, c.property, 1000);
  ASSERT_NE(seed, 0u) << c.property
                      << " never failed in 1,000 histories with the engine broken: " << c.what;
  auto whole = RunHistory(GenerateHistory(seed));
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE(Has(whole->violations, c.property))
      << "seed " << seed << " breaks " << c.property << " unbroken too";
}

INSTANTIATE_TEST_SUITE_P(
    Breaks, PropertyCatchesItsBreak,
    ::testing::Values(
        BreakCase{Break::kDoubleBookWhole, "safety.exclusive",
                  "a held card may be granted whole again"},
        BreakCase{Break::kIgnoreLimits, "safety.limits", "admission ignores group limits"},
        BreakCase{Break::kIgnoreHostCapacity, "safety.capacity",
                  "placement ignores node CPU and host memory"},
        BreakCase{Break::kMigOverlap, "safety.layout", "a MIG instance may start on slices in use"},
        BreakCase{Break::kPreemptNonPreemptible, "safety.preemption",
                  "non-preemptible work may be preempted"},
        BreakCase{Break::kReclaimAnyBorrower, "safety.reclaim",
                  "reclaim may take a lender below its reservation"},
        BreakCase{Break::kReclaimIgnoresInFlight, "safety.reclaim",
                  "reclaim ignores claims waiting out a grace"},
        BreakCase{Break::kNoUnsplit, "liveness.start",
                  "an idle card the engine split never returns to whole"},
        BreakCase{Break::kNoReclaim, "liveness.reservation",
                  "a group below its reservation never reclaims"},
        BreakCase{Break::kThrash, "stability.reconfigure",
                  "idle split cards go back to whole every cycle"},
        BreakCase{Break::kBackfillIgnoresHead, "backfill.head",
                  "any job may use the cards kept for a blocked head"},
        BreakCase{Break::kIgnoreWalltime, "guard.walltime",
                  "a job runs on past its declared walltime"},
        BreakCase{Break::kIgnoreMaxRuntime, "guard.max_runtime",
                  "a job runs on past its queue's max_runtime"},
        BreakCase{Break::kIgnoreMinRuntime, "guard.min_runtime",
                  "a job younger than its queue's min_runtime may be a victim"},
        BreakCase{Break::kIgnorePreemptionDelay, "guard.preemption_delay",
                  "a job may preempt before its queue's preemption_delay"},
        BreakCase{Break::kHoldForAnyClaimant, "liveness.reservation",
                  "a swapping share is held whatever takes its place (seed 987)"},
        BreakCase{Break::kReclaimIgnoresSwapBudget, "liveness.reservation",
                  "reclaim for a share counts room at the overcommit alone (seed 840)"},
        BreakCase{Break::kBorrowReserved, "safety.borrowing",
                  "non-preemptible work may borrow capacity groups reserve"}),
    [](const ::testing::TestParamInfo<BreakCase>& i) {
      std::string n = i.param.property;
      n += "_" + std::to_string(i.index);
      std::replace(n.begin(), n.end(), '.', '_');
      return n;
    });

// The bugs found by hand before the checker existed, found by the generator by itself with the
// engine put back the way it was (the break undoes the fix), each shrunk to five jobs or fewer.
struct KnownBug {
  Break engine_break;
  const char* property;
  const char* model;  // a node of this model in the shrunk history ("" : any)
  const char* queue;  // the violation names a job of this queue ("" : any)
};

class GeneratorFindsKnownBug : public ::testing::TestWithParam<KnownBug> {};

TEST_P(GeneratorFindsKnownBug, WithinTwoThousandSeedsShrunkToFiveJobs) {
  const KnownBug& k = GetParam();
  RunOptions broken;
  broken.engine_break = k.engine_break;
  int shrunk = 0;
  for (uint64_t seed = 1; seed <= 2000; ++seed) {
    Scenario s = GenerateHistory(seed);
    auto r = RunHistory(s, broken);
    if (!r.ok() || !Has(r->violations, k.property)) continue;
    bool model = std::string(k.model).empty() ||
                 std::any_of(s.nodes.begin(), s.nodes.end(),
                             [&](const quota::NodeSpec& n) { return n.gpu_model == k.model; });
    if (!model || ++shrunk > 40) continue;
    Scenario small = Shrink(s, k.property, broken);
    auto again = RunHistory(small, broken);
    ASSERT_TRUE(again.ok());
    bool fits = JobCount(small) <= 5 &&
                std::any_of(small.nodes.begin(), small.nodes.end(), [&](const quota::NodeSpec& n) {
                  return std::string(k.model).empty() || n.gpu_model == k.model;
                });
    bool queue = std::string(k.queue).empty();
    for (const verify::Violation& v : again->violations) {
      if (v.property != k.property) continue;
      for (const WorkloadEntry& w : small.workload) {
        for (const std::string& j : v.jobs)
          queue = queue || (w.base.queue == k.queue && j.rfind(w.base.identity + "-", 0) == 0);
      }
    }
    if (!fits || !queue) continue;
    auto fixed = RunHistory(small);
    ASSERT_TRUE(fixed.ok());
    EXPECT_FALSE(Has(fixed->violations, k.property)) << ScenarioYaml(small);
    std::cout << "seed " << seed << ": " << k.property << " shrunk from " << JobCount(s) << " to "
              << JobCount(small) << " jobs\n"
              << ScenarioYaml(small);
    return;
  }
  FAIL() << "no history in seeds 1..2000 showed " << k.property << " on " << k.model
         << " shrunk to five jobs";
}

INSTANTIATE_TEST_SUITE_P(
    Bugs, GeneratorFindsKnownBug,
    ::testing::Values(
        KnownBug{Break::kNoUnsplit, "liveness.start", "A100-80GB",
                 "train"},                                                 // MIG card never returns
        KnownBug{Break::kNoUnsplit, "liveness.start", "MI300X", "train"},  // nor an AMD card
        KnownBug{Break::kNoUnsplit, "liveness.start", "",
                 "notebook"},  // shares behind a split card
        KnownBug{Break::kReclaimIgnoresInFlight, "safety.reclaim", "", ""}),  // reclaim overshoot
    [](const ::testing::TestParamInfo<KnownBug>& i) {
      return std::string("bug") + std::to_string(i.index);
    });

// A sweep names each broken property's own first histories, with that property's violation, so
// that a rare property shows by seed beside a common one (a run of 969,394 once printed five
// seeds, all backfill.head, of its 171 failures; three were liveness.reservation).
TEST(GeneratedHistories, ASweepNamesTheFirstHistoriesOfEachBrokenProperty) {
  RunOptions o;
  o.engine_break = Break::kNoUnsplit;
  SweepResult r = Sweep(1, 300, o, {}, 0, /*keep_failures=*/3);
  ASSERT_GT(r.failing, 0) << "no history broke a promise with idle split cards never returned";
  ASSERT_FALSE(r.by_property.empty());
  EXPECT_EQ(r.first_by_property.size(), r.by_property.size());
  for (const auto& [property, n] : r.by_property) {
    ASSERT_TRUE(r.first_by_property.count(property)) << property;
    const std::vector<SweepFailure>& firsts = r.first_by_property.at(property);
    EXPECT_EQ(static_cast<int64_t>(firsts.size()), std::min<int64_t>(n, 3)) << property;
    for (size_t i = 0; i < firsts.size(); ++i) {
      EXPECT_EQ(firsts[i].first.property, property) << "seed " << firsts[i].seed;
      if (i > 0) {
        EXPECT_LT(firsts[i - 1].seed, firsts[i].seed) << property;
      }
      auto again = RunHistory(GenerateHistory(firsts[i].seed), o);
      ASSERT_TRUE(again.ok());
      EXPECT_TRUE(Has(again->violations, property)) << "seed " << firsts[i].seed;
    }
  }
}

// The quick set: 10,000 generated histories hold every promise, and cover what they should.
TEST(GeneratedHistories, TenThousandHoldEveryPromiseAndCoverTheirEvents) {
  SweepResult r = Sweep(1, 10000);
  std::cout << "histories: " << r.histories << ", with violations: " << r.failing << "\n"
            << r.coverage.Table();
  for (const auto& [property, n] : r.by_property)
    std::cout << "  " << property << ": " << n << "\n";
  for (const SweepFailure& f : r.failures)
    std::cout << "  seed " << f.seed << ": " << f.first.ToString() << "\n";
  EXPECT_EQ(r.histories, 10000);
  EXPECT_TRUE(r.coverage.AllAtLeast(5));
  EXPECT_EQ(r.failing, 0);
  for (const auto& [property, n] : r.by_property)
    ADD_FAILURE() << property << " broken in " << n << " histories";
}

// fairness.share, on a saturated run of three groups weighted 1, 2 and 3: held within 10% of
// their weighted share in every hour; with the weights ignored (equal shares) it fails.
TEST(Fairness, ASaturatedRunKeepsEachGroupWithinTenPercentOfItsWeightedShare) {
  auto s = LoadScenario(Dir() + "/fairness-saturated.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto fair = RunHistory(*s);
  ASSERT_TRUE(fair.ok());
  for (const verify::Violation& v : fair->violations) ADD_FAILURE() << v.ToString();
  RunOptions broken;
  broken.engine_break = Break::kFairShareIgnoresWeights;
  auto unfair = RunHistory(*s, broken);
  ASSERT_TRUE(unfair.ok());
  EXPECT_TRUE(Has(unfair->violations, "fairness.share"));
}

// A scenario file written for a history reads back as the same history.
TEST(GeneratedHistories, ScenarioYamlReadsBackAsTheSameHistory) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    Scenario s = GenerateHistory(seed);
    auto back = ParseScenario(ScenarioYaml(s));
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << ScenarioYaml(s);
    EXPECT_EQ(ScenarioYaml(*back), ScenarioYaml(s));
    auto a = RunHistory(s), b = RunHistory(*back);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->violations.size(), b->violations.size());
  }
  EXPECT_EQ(ScenarioYaml(GenerateHistory(7)), ScenarioYaml(GenerateHistory(7)));
}

// Issue 37's reservation histories, per model and per pool: group b (reserving 2 GPUs of one
// kind) submits six jobs at 0 and holds cards beyond its reservation, c (reserving 2 of that
// kind) one at 10, and four cycles follow. With the engine whole no promise is broken; with
// reclaim allowed to take any borrower (`broken`), c takes b's reserved cards and the checker
// reports safety.reclaim naming the kind (`kind`: "of H100-80GB", "of pool east").
void CheckReservationHistory(const quota::PolicySpec& p, const std::vector<quota::NodeSpec>& nodes,
                             bool broken, const std::string& kind) {
  quota::EngineOptions o;
  if (broken) o.engine_break = Break::kReclaimAnyBorrower;
  auto e = quota::QuotaEngine::Create(p, nodes, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  verify::Checker checker(p, nodes, {.cycle_s = 10, .grace_s = 0});
  auto submit = [&](const std::string& id, const std::string& q, int64_t t) {
    quota::JobSpec j;
    j.id = id;
    j.identity = q;
    j.group = q;
    j.queue = q;
    auto h = (*e)->Submit(j, t);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    checker.Submitted(*h, j);
  };
  for (int i = 0; i < 6; ++i) submit("b" + std::to_string(i), "b", 0);
  (*e)->RunCycle(0);
  checker.AfterCycle(**e, 0);
  submit("c0", "c", 10);
  for (int64_t t = 10; t <= 40; t += 10) {
    (*e)->RunCycle(t);
    checker.AfterCycle(**e, t);
  }
  bool reported = false;
  for (const verify::Violation& v : checker.violations()) {
    reported =
        reported || (v.property == "safety.reclaim" && v.what.find(kind) != std::string::npos);
  }
  EXPECT_EQ(reported, broken);
  if (!broken) {
    for (const verify::Violation& v : checker.violations()) ADD_FAILURE() << v.ToString();
  }
}

// Issue 37: a reservation per GPU model is a promise. Group b reserves 2 GPUs, both H100, and
// holds 2 H100 and 4 A100 (6, well above its total reservation); c, reserving 2, asks for H100
// only. With the engine whole b keeps its 2 H100 and c waits (no promise broken: c's job could
// not be held on an A100, which the checker knows from c's queue); with reclaim allowed to take
// any borrower, c takes b's H100 and the checker reports safety.reclaim naming the model, while
// b's total stays above its reservation.
TEST(PromisePerModel, AReservationPerModelIsAPromiseTheCheckerKeeps) {
  using tessera::AllocationForm;
  for (const bool broken : {false, true}) {
    quota::PolicySpec p;
    p.pools = {{"all", {AllocationForm::kWhole}}};
    quota::GroupSpec b{"b", "", {2000, 0, 0, 0}, quota::UnlimitedResources(), 1000, "", false};
    b.models = {{"H100-80GB", 2000, quota::kUnlimited}};
    quota::GroupSpec c{"c", "", {2000, 0, 0, 0}, quota::UnlimitedResources(), 1000, "", false};
    p.groups = {b, c};
    p.profiles = {{"card", 1, kWholeGpu, 0, 100, 64, {AllocationForm::kWhole}, {}}};
    p.queues = {{"b", "card", {"b"}, 0, true, quota::WorkloadClass::kTraining},
                {"c", "card", {"c"}, 0, false, quota::WorkloadClass::kTraining}};
    p.queues[1].models = {"H100-80GB"};
    std::vector<quota::NodeSpec> nodes(2);
    for (int n = 0; n < 2; ++n) {
      nodes[n].name = n == 0 ? "h0" : "a0";
      nodes[n].pool = "all";
      nodes[n].cpu_milli = 64000;
      nodes[n].memory_mib = 65536;
      nodes[n].gpu_model = n == 0 ? "H100-80GB" : "A100-80GB";
      nodes[n].gpu_count = n == 0 ? 2 : 4;
    }
    CheckReservationHistory(p, nodes, broken, "of H100-80GB");
  }
}

// Issue 37: a reservation per pool is a promise too, checked as the per-model one above. Group b
// reserves 2 GPUs, both in pool "east", and holds 2 cards in east and 4 in "west"; c, reserving
// 2, draws on east only. With the engine whole b keeps its 2 east cards and c waits; with
// reclaim allowed to take any borrower, c takes them and the checker reports safety.reclaim
// naming the pool, while b's total stays above its reservation.
TEST(PromisePerPool, AReservationPerPoolIsAPromiseTheCheckerKeeps) {
  using tessera::AllocationForm;
  for (const bool broken : {false, true}) {
    quota::PolicySpec p;
    p.pools = {{"east", {AllocationForm::kWhole}}, {"west", {AllocationForm::kWhole}}};
    quota::GroupSpec b{"b", "", {2000, 0, 0, 0}, quota::UnlimitedResources(), 1000, "", false};
    b.pools = {{"east", 2000, quota::kUnlimited}};
    quota::GroupSpec c{"c", "", {2000, 0, 0, 0}, quota::UnlimitedResources(), 1000, "", false};
    p.groups = {b, c};
    p.profiles = {{"card", 1, kWholeGpu, 0, 100, 64, {AllocationForm::kWhole}, {}},
                  {"east-card", 1, kWholeGpu, 0, 100, 64, {AllocationForm::kWhole}, {"east"}}};
    p.queues = {{"b", "card", {"b"}, 0, true, quota::WorkloadClass::kTraining},
                {"c", "east-card", {"c"}, 0, false, quota::WorkloadClass::kTraining}};
    std::vector<quota::NodeSpec> nodes(2);
    for (int n = 0; n < 2; ++n) {
      nodes[n].name = n == 0 ? "e0" : "w0";
      nodes[n].pool = n == 0 ? "east" : "west";
      nodes[n].cpu_milli = 64000;
      nodes[n].memory_mib = 65536;
      nodes[n].gpu_model = "A100-80GB";
      nodes[n].gpu_count = n == 0 ? 2 : 4;
    }
    CheckReservationHistory(p, nodes, broken, "of pool east");
  }
}

}  // namespace
}  // namespace tessera::sim
