// `tessera sim histories`: generated histories through the quota engine with the promise
// checker watching (sim/histories.h); a failing seed shrunk to a scenario file.
//
//   tessera sim histories [--count 10000] [--seed 1] [--max-seconds 0] [--shrink] [--out DIR]
//                         [--break NAME] [--seed-only N]
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include "cli/scenario_commands.h"
#include "cli/table.h"
#include "sim/histories.h"

namespace tessera::cli {
namespace {

using Break = quota::EngineOptions::Break;

const std::map<std::string, Break>& Breaks() {
  static const std::map<std::string, Break> m = {
      {"none", Break::kNone},
      {"no-unsplit", Break::kNoUnsplit},
      {"reclaim-ignores-in-flight", Break::kReclaimIgnoresInFlight},
      {"reclaim-any-borrower", Break::kReclaimAnyBorrower},
      {"preempt-non-preemptible", Break::kPreemptNonPreemptible},
      {"ignore-limits", Break::kIgnoreLimits},
      {"double-book-whole", Break::kDoubleBookWhole},
      {"mig-overlap", Break::kMigOverlap},
      {"thrash", Break::kThrash},
      {"no-reclaim", Break::kNoReclaim},
      {"fair-share-ignores-weights", Break::kFairShareIgnoresWeights},
      {"ignore-host-capacity", Break::kIgnoreHostCapacity},
      {"backfill-ignores-head", Break::kBackfillIgnoresHead},
      {"ignore-walltime", Break::kIgnoreWalltime},
      {"ignore-max-runtime", Break::kIgnoreMaxRuntime},
      {"ignore-min-runtime", Break::kIgnoreMinRuntime},
      {"ignore-preemption-delay", Break::kIgnorePreemptionDelay},
      {"hold-for-any-claimant", Break::kHoldForAnyClaimant},
      {"reclaim-ignores-swap-budget", Break::kReclaimIgnoresSwapBudget},
      {"borrow-reserved", Break::kBorrowReserved},
  };
  return m;
}

struct HistoriesCli {
  int64_t count = 10000;
  uint64_t seed = 1;
  double max_seconds = 0;
  bool shrink = false;
  std::string out;
  std::string engine_break = "none";
  int64_t only = -1;
};

// How many failing seeds a run names, overall and per property.
constexpr size_t kSeedsShown = 5;

int RunHistories(const HistoriesCli& c) {
  auto b = Breaks().find(c.engine_break);
  if (b == Breaks().end()) {
    std::vector<std::string> names;
    for (const auto& [name, v] : Breaks()) names.push_back(name);
    std::cerr << "tessera sim histories: --break: " << UnknownChoice("break", c.engine_break, names)
              << "\n";
    return kExitBadInput;
  }
  sim::RunOptions o;
  o.engine_break = b->second;
  const uint64_t first = c.only >= 0 ? static_cast<uint64_t>(c.only) : c.seed;
  const int64_t count = c.only >= 0 ? 1 : c.count;
  sim::SweepResult r = sim::Sweep(first, count, o, {}, c.max_seconds);
  std::cout << "histories: " << r.histories << " (seeds " << first << ".."
            << first + static_cast<uint64_t>(r.histories) - 1 << "), " << r.failing
            << " with violations, " << static_cast<int64_t>(r.seconds * 1000) << " ms ("
            << (r.seconds > 0 ? static_cast<int64_t>(static_cast<double>(r.histories) / r.seconds)
                              : 0)
            << " histories/s)"
            << (c.engine_break != "none" ? ", engine broken: " + c.engine_break : "") << "\n";
  for (const auto& [property, n] : r.by_property) {
    std::cout << "  " << property << ": " << n << " histories; first seeds";
    const auto& firsts = r.first_by_property.at(property);
    for (size_t i = 0; i < firsts.size() && i < kSeedsShown; ++i)
      std::cout << (i ? ", " : " ") << firsts[i].seed;
    std::cout << "\n";
  }
  std::cout << r.coverage.Table();
  for (size_t i = 0; i < r.failures.size() && i < kSeedsShown; ++i) {
    std::cout << "seed " << r.failures[i].seed << ": " << r.failures[i].first.ToString() << "\n";
  }
  // A property not among the first failures: its first history too, so each is named once.
  for (const auto& [property, firsts] : r.first_by_property) {
    const bool shown = std::any_of(
        r.failures.begin(), r.failures.begin() + std::min(r.failures.size(), kSeedsShown),
        [&](const sim::SweepFailure& f) { return f.first.property == property; });
    if (!shown)
      std::cout << "seed " << firsts[0].seed << ": " << firsts[0].first.ToString() << "\n";
  }
  if (!c.shrink) return r.failing > 0 ? kExitUnsatisfiable : kExitOk;
  // The first history of each broken property, shrunk for that property.
  for (const auto& [property, firsts] : r.first_by_property) {
    if (property == "generator") continue;  // a scenario the engine refused: nothing to shrink
    const sim::SweepFailure& f = firsts.front();
    sim::Scenario s = sim::GenerateHistory(f.seed);
    sim::Scenario small = sim::Shrink(s, f.first.property, o);
    std::string yaml = sim::ScenarioYaml(small);
    std::cout << "seed " << f.seed << " shrunk from " << sim::JobCount(s) << " jobs on "
              << s.nodes.size() << " nodes to " << sim::JobCount(small) << " jobs on "
              << small.nodes.size() << " nodes (" << f.first.property << "):\n";
    if (c.out.empty()) {
      std::cout << yaml;
    } else {
      std::error_code ec;
      std::filesystem::create_directories(c.out, ec);
      std::string path =
          c.out + "/seed-" + std::to_string(f.seed) + "-" + f.first.property + ".yaml";
      std::ofstream file(path, std::ios::binary);
      file << "# tessera sim histories --seed-only " << f.seed << " --break " << c.engine_break
           << ": " << f.first.property << ", shrunk\n"
           << yaml;
      if (!file) {
        std::cerr << "tessera sim histories: cannot write " << path << "\n";
        return kExitBadInput;
      }
      std::cout << "  written to " << path << "\n";
    }
  }
  return r.failing > 0 ? kExitUnsatisfiable : kExitOk;
}

}  // namespace

void RegisterHistoriesCommands(CLI::App& app, CommandContext& ctx) {
  CLI::App* sim = CommandFamily(app, "sim", "Simulate scheduling");
  auto c = std::make_shared<HistoriesCli>();
  auto* h = sim->add_subcommand(
      "histories",
      "Generated histories checked against the scheduling promises (docs/scheduling.md)");
  h->add_option("--count", c->count, "histories to run (10000)");
  h->add_option("--seed", c->seed, "first seed (1)");
  h->add_option("--seed-only", c->only, "run this one seed");
  h->add_option("--max-seconds", c->max_seconds, "stop after this long (0: run them all)");
  h->add_flag("--shrink", c->shrink,
              "shrink the first failing history of each broken property to a small scenario");
  h->add_option("--out", c->out, "write the shrunk scenario to DIR");
  h->add_option("--break", c->engine_break,
                "break the engine on purpose (to see the checker notice)");
  h->callback([c, &ctx] { ctx.exit_code = RunHistories(*c); });
}

}  // namespace tessera::cli
