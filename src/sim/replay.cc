#include "sim/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>
#include <climits>

#include "model/quantity.h"
#include "sched/scheduler.h"

namespace tessera::sim {
namespace {

using sched::PlacementRequest;

// Fisher-Yates with raw 64-bit draws, so a seed gives the same order with every standard
// library.
template <typename T>
void Shuffle(std::vector<T>* v, std::mt19937_64* rng) {
  for (size_t i = v->size(); i > 1; --i) {
    size_t j = static_cast<size_t>((*rng)() % i);
    std::swap((*v)[i - 1], (*v)[j]);
  }
}

PlacementRequest ToRequest(const TracePod& p, const sched::ClusterState& state, int tag) {
  PlacementRequest r;
  r.cpu_milli = p.cpu_milli;
  r.memory_mib = p.memory_mib;
  r.gpu_count = p.num_gpu;
  r.gpu_milli = p.num_gpu > 0 ? p.gpu_milli : 0;
  r.tag = tag;
  for (const std::string& m : p.gpu_spec) {
    int id = state.model_id(m);
    // A model the cluster lacks still restricts the request: the top bit matches no node.
    r.models |= id >= 0 ? (sched::ModelMask{1} << id) : (sched::ModelMask{1} << 63);
  }
  return r;
}

}  // namespace

Result<ReplayCurve> ReplayOpenb(const std::vector<Node>& nodes, const std::vector<TracePod>& pods,
                                const ReplayOptions& options) {
  auto state = sched::ClusterState::FromNodes(nodes);
  if (!state.ok()) return state.status();
  if (pods.empty()) return Status::InvalidArgument("no pods to replay");
  if (options.tune_milli <= 0) return Status::InvalidArgument("tune must be positive");

  // The original pods sorted by name (the protocol's starting order).
  std::vector<int> original(pods.size());
  for (size_t i = 0; i < pods.size(); ++i) original[i] = static_cast<int>(i);
  std::stable_sort(original.begin(), original.end(),
                   [&](int a, int b) { return pods[a].name < pods[b].name; });

  std::vector<PlacementRequest> requests;
  requests.reserve(pods.size());
  for (int i : original) requests.push_back(ToRequest(pods[i], *state, i));

  // FGD and tessera-oracle are told the typical mix of the original trace up front.
  sched::PolicyConfig config;
  config.target_mix = sched::TypicalMix(requests);
  auto policy = sched::MakePolicy(options.policy, config);
  if (!policy.ok()) return policy.status();

  std::mt19937_64 rng(options.seed);
  std::vector<PlacementRequest> order = requests;
  Shuffle(&order, &rng);

  // Tune the total GPU request to tune x capacity.
  const MilliGpu capacity = state->gpu_capacity();
  const MilliGpu target = capacity * options.tune_milli / 1000;
  MilliGpu total = 0;
  for (const auto& r : order) total += r.total_gpu_milli();
  if (total < target) {
    while (true) {
      const PlacementRequest& r = requests[rng() % requests.size()];
      if (total + r.total_gpu_milli() > target) break;
      total += r.total_gpu_milli();
      order.push_back(r);
    }
  } else {
    while (total > target && !order.empty()) {
      size_t k = rng() % order.size();
      total -= order[k].total_gpu_milli();
      order.erase(order.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }

  sched::Scheduler scheduler(std::move(*state), std::move(*policy), options.seed);
  ReplayCurve curve;
  curve.capacity = capacity;
  curve.unallocated_pct.assign(kMaxArrivedPct + 1, 100.0);
  MilliGpu arrived = 0;
  int next_pct = 1;
  // The curve at arrived = p% is the state after the last pod whose arrival kept the total at
  // or below p% of capacity.
  double prev_unalloc = 100.0;
  auto unallocated = [&] {
    const MilliGpu allocated = scheduler.state().gpu_allocated();
    return 100.0 - 100.0 * static_cast<double>(allocated) / static_cast<double>(capacity);
  };
  for (const PlacementRequest& r : order) {
    sched::PlacementResult res = scheduler.Place(r);
    ++curve.pods;
    if (!res.placed()) {
      ++curve.dropped;
      if (res.outcome == sched::Outcome::kNeverSchedulable) ++curve.never_schedulable;
    }
    if (options.check_invariants) {
      Status st = scheduler.state().CheckInvariants();
      if (!st.ok()) return st;
    }
    arrived += r.total_gpu_milli();
    while (next_pct <= kMaxArrivedPct && capacity * next_pct < arrived * 100) {
      curve.unallocated_pct[next_pct++] = prev_unalloc;
    }
    prev_unalloc = unallocated();
  }
  // Percentages at or beyond the final arrival hold the final state.
  for (; next_pct <= kMaxArrivedPct; ++next_pct) curve.unallocated_pct[next_pct] = prev_unalloc;
  return curve;
}

Result<TimedReport> ReplayOpenbTimed(const std::vector<Node>& nodes, const std::vector<TracePod>& pods,
                                     const std::string& policy_name, uint64_t seed, int64_t compress) {
  if (compress < 1) return Status::InvalidArgument("compress must be at least 1");
  auto state = sched::ClusterState::FromNodes(nodes);
  if (!state.ok()) return state.status();
  struct Pod {
    PlacementRequest req;
    int64_t arrive = 0;
    int64_t duration = 0;
    int64_t start = -1;
  };
  std::vector<Pod> all;
  std::vector<PlacementRequest> requests;
  for (size_t i = 0; i < pods.size(); ++i) {
    const TracePod& p = pods[i];
    if (p.creation_time < 0 || p.deletion_time < 0) {
      return Status::InvalidArgument("pod '" + p.name +
                                     "' has no creation_time/deletion_time: --timed needs a trace with times");
    }
    Pod x;
    x.req = ToRequest(p, *state, static_cast<int>(i));
    x.arrive = p.creation_time / compress;
    x.duration = std::max<int64_t>(0, p.deletion_time - p.creation_time);
    all.push_back(x);
    requests.push_back(x.req);
  }
  if (all.empty()) return Status::InvalidArgument("no pods to replay");
  sched::PolicyConfig config;
  config.target_mix = sched::TypicalMix(requests);
  auto policy = sched::MakePolicy(policy_name, config);
  if (!policy.ok()) return policy.status();
  std::vector<size_t> by_arrival(all.size());
  for (size_t i = 0; i < all.size(); ++i) by_arrival[i] = i;
  std::stable_sort(by_arrival.begin(), by_arrival.end(), [&](size_t a, size_t b) { return all[a].arrive < all[b].arrive; });

  const MilliGpu capacity = state->gpu_capacity();
  sched::Scheduler scheduler(std::move(*state), std::move(*policy), seed);
  TimedReport rep;
  rep.policy = policy_name;
  rep.pods = static_cast<int64_t>(all.size());
  // Completions: (end time, pod, placement).
  using Done = std::tuple<int64_t, size_t, sched::Placement>;
  auto later = [](const Done& a, const Done& b) { return std::get<0>(a) > std::get<0>(b); };
  std::vector<Done> running;  // a heap ordered by end time
  std::vector<size_t> waiting;
  std::vector<double> waits;
  size_t next = 0;
  int64_t now = all[by_arrival[0]].arrive;
  const int64_t t0 = now;
  double weighted = 0;
  auto try_start = [&](size_t i) {
    sched::PlacementResult r = scheduler.Place(all[i].req);
    if (r.outcome == sched::Outcome::kNeverSchedulable) {
      ++rep.never_schedulable;
      return true;  // leaves the queue
    }
    if (!r.placed()) return false;
    all[i].start = now;
    ++rep.started;
    waits.push_back(static_cast<double>(now - all[i].arrive));
    running.emplace_back(now + all[i].duration, i, r.placement);
    std::push_heap(running.begin(), running.end(), later);
    return true;
  };
  while (next < by_arrival.size() || !running.empty()) {
    // The next event: an arrival or a completion, whichever is first.
    int64_t t_arrive = next < by_arrival.size() ? all[by_arrival[next]].arrive : INT64_MAX;
    int64_t t_done = running.empty() ? INT64_MAX : std::get<0>(running.front());
    int64_t t = std::min(t_arrive, t_done);
    if (t == INT64_MAX) break;
    weighted += static_cast<double>(scheduler.state().gpu_allocated()) * static_cast<double>(t - now);
    now = t;
    bool freed = false;
    while (!running.empty() && std::get<0>(running.front()) == now) {
      std::pop_heap(running.begin(), running.end(), later);
      scheduler.Release(std::get<2>(running.back()));
      running.pop_back();
      freed = true;
    }
    while (next < by_arrival.size() && all[by_arrival[next]].arrive == now) {
      size_t i = by_arrival[next++];
      // Behind a queue, a new pod waits its turn (the scan below may still start it now).
      if (!waiting.empty() || !try_start(i)) {
        waiting.push_back(i);
        ++rep.queued;
      }
    }
    if (freed || !waiting.empty()) {
      std::vector<size_t> still;
      for (size_t i : waiting) {
        if (!try_start(i)) still.push_back(i);
      }
      waiting.swap(still);
    }
    rep.gpu_allocated_peak_pct = std::max(
        rep.gpu_allocated_peak_pct,
        100.0 * static_cast<double>(scheduler.state().gpu_allocated()) / static_cast<double>(capacity));
  }
  rep.makespan_s = now - t0;
  rep.gpu_allocated_mean_pct =
      rep.makespan_s > 0 ? 100.0 * weighted / static_cast<double>(rep.makespan_s) / static_cast<double>(capacity) : 0;
  std::sort(waits.begin(), waits.end());
  if (!waits.empty()) {
    double sum = 0;
    for (double w : waits) sum += w;
    rep.wait_mean_s = sum / static_cast<double>(waits.size());
    rep.wait_p50_s = waits[waits.size() / 2];
    rep.wait_p99_s = waits[static_cast<size_t>(0.99 * static_cast<double>(waits.size() - 1))];
    rep.wait_max_s = waits.back();
  }
  return rep;
}

Stat Summarize(std::vector<double> v) {
  Stat s;
  if (v.empty()) return s;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  s.median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
  if (n > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(ss / static_cast<double>(n - 1));
  }
  return s;
}

Result<SeedSweep> SweepSeeds(const std::vector<Node>& nodes, const std::vector<TracePod>& pods,
                             const std::string& policy, const std::vector<uint64_t>& seeds,
                             int64_t tune_milli, int threads,
                             const std::function<void(int, int)>& progress) {
  auto start = std::chrono::steady_clock::now();
  SeedSweep sweep;
  sweep.policy = policy;
  sweep.seeds = seeds;
  sweep.curves.resize(seeds.size());
  std::vector<Status> errors(seeds.size());
  std::atomic<size_t> next{0};
  std::atomic<int> done{0};
  auto worker = [&] {
    while (true) {
      size_t i = next.fetch_add(1);
      if (i >= seeds.size()) return;
      ReplayOptions o;
      o.policy = policy;
      o.seed = seeds[i];
      o.tune_milli = tune_milli;
      auto c = ReplayOpenb(nodes, pods, o);
      if (c.ok()) {
        sweep.curves[i] = std::move(*c);
      } else {
        errors[i] = c.status();
      }
      int d = ++done;
      if (progress) progress(d, static_cast<int>(seeds.size()));
    }
  };
  int n = std::max(1, std::min<int>(threads, static_cast<int>(seeds.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  for (const Status& e : errors) {
    if (!e.ok()) return e;
  }
  sweep.unallocated.resize(kMaxArrivedPct + 1);
  for (int p = 0; p <= kMaxArrivedPct; ++p) {
    std::vector<double> v;
    for (const auto& c : sweep.curves) v.push_back(c.unallocated_pct[p]);
    sweep.unallocated[p] = Summarize(std::move(v));
  }
  sweep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return sweep;
}

Result<std::vector<uint64_t>> ParseSeeds(const std::string& text) {
  std::vector<uint64_t> seeds;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t dash = item.find('-');
    auto bad = [&] { return Status::InvalidArgument("bad seed list '" + text + "' (use 42-51 or 1,2,3)"); };
    if (dash == std::string::npos) {
      auto v = ParseNonNegativeInt(item);
      if (!v.ok()) return bad();
      seeds.push_back(static_cast<uint64_t>(*v));
    } else {
      auto a = ParseNonNegativeInt(item.substr(0, dash));
      auto b = ParseNonNegativeInt(item.substr(dash + 1));
      if (!a.ok() || !b.ok() || *b < *a || *b - *a > 10000) return bad();
      for (int64_t s = *a; s <= *b; ++s) seeds.push_back(static_cast<uint64_t>(s));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (seeds.empty()) return Status::InvalidArgument("empty seed list");
  return seeds;
}

}  // namespace tessera::sim
