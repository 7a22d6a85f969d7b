// `tessera whatif --usage`: synthetic histories with known answers replayed under the three
// plans, against the lower bounds.
#include "sim/usage_whatif.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace tessera::sim::usage {
namespace {

constexpr int64_t kGiB = 1024LL * 1024 * 1024;
constexpr int64_t kT0 = 1'700'000'000;  // epoch seconds

// One workload's rows for `minutes` one-minute samples: active(m) says whether minute m is busy
// (utilization `util` percent, else 0); it holds `mem_gib` throughout.
void AddRows(std::string* csv, const std::string& name, const std::string& team, int minutes,
             int64_t mem_gib, int util, const std::function<bool(int)>& active) {
  for (int m = 0; m < minutes; ++m) {
    *csv += name + "," + std::to_string(kT0 + 60 * m) + "," + std::to_string(active(m) ? util : 0) +
            "," + std::to_string(mem_gib * kGiB) + "," + team + ",1\n";
  }
}

const char* kHeader = "workload,timestamp,gpu_util_pct,gpu_memory_bytes,team,requested_gpus\n";
constexpr int kMinutes = 6 * 60;

// Ten notebooks of 16 GiB, each busy 6 minutes an hour (idle 90%), in turn: never two at once.
void TenNotebooks(std::string* csv) {
  for (int k = 0; k < 10; ++k) {
    AddRows(csv, "nb" + std::to_string(k), "research", kMinutes, 16, 80,
            [k](int m) { return (m % 60) / 6 == k; });
  }
}
// Two of `gib` taking turns every half hour: never active together.
void Pair(std::string* csv, int64_t gib) {
  AddRows(csv, "day", "vision", kMinutes, gib, 90, [](int m) { return (m / 30) % 2 == 0; });
  AddRows(csv, "night", "vision", kMinutes, gib, 90, [](int m) { return (m / 30) % 2 == 1; });
}
// One always busy.
void Always(std::string* csv) {
  AddRows(csv, "serve", "prod", kMinutes, 40, 70, [](int) { return true; });
}

WhatIfUsage Replay(const std::string& csv, WhatIfOptions o = {}) {
  History h;
  Status s = ParseUsageCsv(csv, "test.csv", &h);
  EXPECT_TRUE(s.ok()) << s.message();
  auto r = RunWhatIfUsage(std::move(h), o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(*r) : WhatIfUsage{};
}

const WorkloadRow* Find(const WhatIfUsage& r, const std::string& name) {
  for (const auto& w : r.workloads) {
    if (w.name == name) return &w;
  }
  return nullptr;
}

TEST(UsageWhatIf, IdleNinetyPercentSwapsDownToTheBound) {
  std::string csv = kHeader;
  TenNotebooks(&csv);
  WhatIfUsage r = Replay(csv);
  const WorkloadRow* nb = Find(r, "nb3");
  ASSERT_NE(nb, nullptr);
  EXPECT_EQ(nb->stats.duty_pm, 100);  // 6 minutes an hour
  EXPECT_EQ(nb->stats.peak_mem_mib, 16 * 1024);
  EXPECT_EQ(nb->cls, "interactive");
  EXPECT_EQ(nb->cap_mib, 18 * 1024);   // 16 GiB + 10%, rounded up to GiB
  EXPECT_EQ(nb->stats.idle_spans, 7);  // before the first burst, between the six, after
  EXPECT_EQ(r.lb_memory_cards, 1);     // one active at a time
  EXPECT_EQ(r.lb_cards, 1);
  EXPECT_EQ(r.whole.cards, 10);
  // Caps of 18 GiB: four to an 80 GB card without swapping.
  EXPECT_EQ(r.forms.cards, 3);
  EXPECT_GT(r.forms.cards, r.swap.cards);
  EXPECT_LE(r.swap.cards * 100, r.lb_cards * 125);
  EXPECT_GT(r.swap.wakes, 0);
  EXPECT_LE(r.swap.wake_p99_ms, r.options.wake_p99_limit_ms);
  EXPECT_EQ(r.duty_sum_milli, 1000);  // ten at 10%: one GPU busy on average
}

TEST(UsageWhatIf, TwoNeverActiveTogetherShareOneCard) {
  std::string csv = kHeader;
  Pair(&csv, 60);
  WhatIfUsage r = Replay(csv);
  EXPECT_EQ(r.lb_cards, 1);
  EXPECT_EQ(r.whole.cards, 2);
  EXPECT_EQ(r.forms.cards, 2);  // 66 GiB caps: one per card
  EXPECT_LE(r.swap.cards * 100, r.lb_cards * 125);
  // Every switch moves one out and one in: 66 GiB each way at 50 GB/s, about 2.8 s.
  EXPECT_GT(r.swap.wake_p99_ms, 2000);
  EXPECT_LT(r.swap.wake_p99_ms, 4000);
  EXPECT_EQ(r.swap.waits_for_room, 0);
  // Held by the swap plan: no more than the forms plan, at least what was used.
  const TeamHours& held = r.swap.teams.at("vision");
  EXPECT_LE(held.held_gpu_milli_ms, r.forms.teams.at("vision").held_gpu_milli_ms);
  EXPECT_GE(held.held_gpu_milli_ms, held.used_gpu_milli_ms / 2);
}

TEST(UsageWhatIf, AlwaysActiveKeepsItsCard) {
  std::string csv = kHeader;
  Always(&csv);
  WhatIfUsage r = Replay(csv);
  const WorkloadRow* w = Find(r, "serve");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->stats.duty_pm, 1000);
  EXPECT_EQ(w->stats.idle_spans, 0);
  EXPECT_EQ(w->cls, "inference");
  EXPECT_EQ(r.lb_cards, 1);
  EXPECT_EQ(r.swap.cards, 1);
  EXPECT_EQ(r.swap.wakes, 0);
  EXPECT_EQ(r.forms.partitions + r.forms.whole, 1);
}

TEST(UsageWhatIf, MixedFleetWithinAQuarterOfTheBound) {
  std::string csv = kHeader;
  TenNotebooks(&csv);
  Pair(&csv, 50);
  Always(&csv);
  WhatIfUsage r = Replay(csv);
  // At any minute: one notebook (16), one of the pair (50) and the server (40): 106 GiB.
  EXPECT_EQ(r.lb_memory_cards, 2);
  EXPECT_EQ(r.whole.cards, 13);
  EXPECT_LT(r.swap.cards, r.forms.cards);
  EXPECT_LE(r.swap.cards * 100, r.lb_cards * 125);
  EXPECT_LE(r.swap.wake_p99_ms, r.options.wake_p99_limit_ms);
  EXPECT_EQ(r.swap.teams.size(), 3u);
  // Reports carry the answers.
  const std::string text = UsageText(r);
  EXPECT_NE(text.find("lower bound"), std::string::npos);
  const std::string json = UsageJson(r);
  EXPECT_NE(json.find("\"lower_bound\""), std::string::npos);
  const std::string html = UsageHtml(r);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("polyline"), std::string::npos);
}

TEST(UsageWhatIf, SlicingBoundsTheWaitOfAWakeBehindActiveShares) {
  // Two of 50 GiB (caps of 55), each busy one hour in two, overlapping by half an hour: on one
  // card (overcommit 200%) the second to wake finds the first active and filling the card.
  std::string csv = kHeader;
  AddRows(&csv, "early", "x", kMinutes, 50, 90, [](int m) { return m % 120 < 60; });
  AddRows(&csv, "late", "x", kMinutes, 50, 90, [](int m) { return (m + 90) % 120 < 60; });
  WhatIfOptions o;
  o.overcommits = {200};
  o.swap_duty_pm = 1000;
  WhatIfUsage waiting = Replay(csv, o);
  EXPECT_EQ(waiting.swap.cards, 1);
  EXPECT_GT(waiting.swap.waits_for_room, 0);
  EXPECT_GE(waiting.swap.wake_p99_ms, 25 * 60'000);  // until the other goes idle
  EXPECT_EQ(waiting.swap.preemptions, 0);
  o.slice_ms = 60'000;
  WhatIfUsage sliced = Replay(csv, o);
  EXPECT_EQ(sliced.swap.cards, 1);
  EXPECT_GT(sliced.swap.preemptions, 0);
  EXPECT_LT(sliced.swap.wake_p99_ms, 10'000);  // the transfers only
  // The share swapped out comes back once the other has run its slice, and so on in turn.
  EXPECT_GE(sliced.swap.return_p99_ms, 60'000);
  EXPECT_LT(sliced.swap.return_p99_ms, 70'000);
}

TEST(UsageWhatIf, BadOptionsAndCardAreRefused) {
  std::string csv = kHeader;
  Always(&csv);
  History h;
  ASSERT_TRUE(ParseUsageCsv(csv, "t.csv", &h).ok());
  WhatIfOptions o;
  o.card = "NoSuchGPU";
  auto r = RunWhatIfUsage(h, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--card"), std::string::npos);
  o = {};
  o.overcommits = {50};
  EXPECT_FALSE(RunWhatIfUsage(h, o).ok());
}

}  // namespace
}  // namespace tessera::sim::usage
