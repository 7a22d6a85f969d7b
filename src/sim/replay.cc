#include "sim/replay.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>

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

namespace {

// A pod of the timed replay: its request, arrival (compressed), how long it runs, when it
// started (-1: not yet).
struct TimedPod {
  PlacementRequest req;
  int64_t arrive = 0;
  int64_t duration = 0;
  int64_t start = -1;
};

// The trace's pods with their times; each needs both.
Result<std::vector<TimedPod>> TimedPods(const std::vector<TracePod>& pods,
                                        const sched::ClusterState& state, int64_t compress) {
  std::vector<TimedPod> all;
  for (size_t i = 0; i < pods.size(); ++i) {
    const TracePod& p = pods[i];
    if (p.creation_time < 0 || p.deletion_time < 0) {
      return Status::InvalidArgument(
          "pod '" + p.name +
          "' has no creation_time/deletion_time: --timed needs a trace with times");
    }
    TimedPod x;
    x.req = ToRequest(p, state, static_cast<int>(i));
    x.arrive = p.creation_time / compress;
    x.duration = std::max<int64_t>(0, p.deletion_time - p.creation_time);
    all.push_back(x);
  }
  return all;
}

// The timed replay's event loop: pods arrive in order and start when they fit, each behind
// those queued before it; completions free their placements.
class TimedRun {
 public:
  TimedRun(sched::Scheduler* scheduler, std::vector<TimedPod>* all, MilliGpu capacity,
           TimedReport* rep)
      : scheduler_(*scheduler), all_(*all), capacity_(capacity), rep_(*rep) {}

  // Runs every pod (by_arrival: their indices by arrival), then fills in the report.
  void Run(const std::vector<size_t>& by_arrival) {
    size_t next = 0;
    now_ = all_[by_arrival[0]].arrive;
    const int64_t t0 = now_;
    double weighted = 0;
    while (next < by_arrival.size() || !running_.empty()) {
      // The next event: an arrival or a completion, whichever is first.
      int64_t t_arrive = next < by_arrival.size() ? all_[by_arrival[next]].arrive : INT64_MAX;
      int64_t t_done = running_.empty() ? INT64_MAX : std::get<0>(running_.front());
      int64_t t = std::min(t_arrive, t_done);
      if (t == INT64_MAX) break;
      weighted +=
          static_cast<double>(scheduler_.state().gpu_allocated()) * static_cast<double>(t - now_);
      now_ = t;
      const bool freed = ReleaseEnded();
      while (next < by_arrival.size() && all_[by_arrival[next]].arrive == now_) {
        size_t i = by_arrival[next++];
        // Behind a queue, a new pod waits its turn (the scan below may still start it now).
        if (!waiting_.empty() || !TryStart(i)) {
          waiting_.push_back(i);
          ++rep_.queued;
        }
      }
      if (freed || !waiting_.empty()) {
        std::vector<size_t> still;
        for (size_t i : waiting_) {
          if (!TryStart(i)) still.push_back(i);
        }
        waiting_.swap(still);
      }
      rep_.gpu_allocated_peak_pct =
          std::max(rep_.gpu_allocated_peak_pct,
                   100.0 * static_cast<double>(scheduler_.state().gpu_allocated()) /
                       static_cast<double>(capacity_));
    }
    rep_.makespan_s = now_ - t0;
    rep_.gpu_allocated_mean_pct = rep_.makespan_s > 0
                                      ? 100.0 * weighted / static_cast<double>(rep_.makespan_s) /
                                            static_cast<double>(capacity_)
                                      : 0;
    WaitStats();
  }

 private:
  // Completions: (end time, pod, placement).
  using Done = std::tuple<int64_t, size_t, sched::Placement>;
  static bool Later(const Done& a, const Done& b) { return std::get<0>(a) > std::get<0>(b); }

  // Pod i placed now, or dropped as never schedulable: false when it must wait.
  bool TryStart(size_t i) {
    sched::PlacementResult r = scheduler_.Place(all_[i].req);
    if (r.outcome == sched::Outcome::kNeverSchedulable) {
      ++rep_.never_schedulable;
      return true;  // leaves the queue
    }
    if (!r.placed()) return false;
    all_[i].start = now_;
    ++rep_.started;
    waits_.push_back(static_cast<double>(now_ - all_[i].arrive));
    running_.emplace_back(now_ + all_[i].duration, i, r.placement);
    std::push_heap(running_.begin(), running_.end(), Later);
    return true;
  }

  // Releases the pods that end now; whether any did.
  bool ReleaseEnded() {
    bool freed = false;
    while (!running_.empty() && std::get<0>(running_.front()) == now_) {
      std::pop_heap(running_.begin(), running_.end(), Later);
      scheduler_.Release(std::get<2>(running_.back()));
      running_.pop_back();
      freed = true;
    }
    return freed;
  }

  void WaitStats() {
    std::sort(waits_.begin(), waits_.end());
    if (waits_.empty()) return;
    double sum = 0;
    for (double w : waits_) sum += w;
    rep_.wait_mean_s = sum / static_cast<double>(waits_.size());
    rep_.wait_p50_s = waits_[waits_.size() / 2];
    rep_.wait_p99_s = waits_[static_cast<size_t>(0.99 * static_cast<double>(waits_.size() - 1))];
    rep_.wait_max_s = waits_.back();
  }

  sched::Scheduler& scheduler_;
  std::vector<TimedPod>& all_;
  const MilliGpu capacity_;
  TimedReport& rep_;
  std::vector<Done> running_;  // a heap ordered by end time
  std::vector<size_t> waiting_;
  std::vector<double> waits_;
  int64_t now_ = 0;
};

}  // namespace

Result<TimedReport> ReplayOpenbTimed(const std::vector<Node>& nodes,
                                     const std::vector<TracePod>& pods,
                                     const std::string& policy_name, uint64_t seed,
                                     int64_t compress) {
  if (compress < 1) return Status::InvalidArgument("compress must be at least 1");
  auto state = sched::ClusterState::FromNodes(nodes);
  if (!state.ok()) return state.status();
  auto timed = TimedPods(pods, *state, compress);
  if (!timed.ok()) return timed.status();
  std::vector<TimedPod>& all = *timed;
  if (all.empty()) return Status::InvalidArgument("no pods to replay");
  std::vector<PlacementRequest> requests;
  for (const TimedPod& x : all) requests.push_back(x.req);
  sched::PolicyConfig config;
  config.target_mix = sched::TypicalMix(requests);
  auto policy = sched::MakePolicy(policy_name, config);
  if (!policy.ok()) return policy.status();
  std::vector<size_t> by_arrival(all.size());
  for (size_t i = 0; i < all.size(); ++i) by_arrival[i] = i;
  std::stable_sort(by_arrival.begin(), by_arrival.end(),
                   [&](size_t a, size_t b) { return all[a].arrive < all[b].arrive; });

  const MilliGpu capacity = state->gpu_capacity();
  sched::Scheduler scheduler(std::move(*state), std::move(*policy), seed);
  TimedReport rep;
  rep.policy = policy_name;
  rep.pods = static_cast<int64_t>(all.size());
  TimedRun(&scheduler, &all, capacity, &rep).Run(by_arrival);
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
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t dash = item.find('-');
    auto bad = [&] {
      return Status::InvalidArgument("bad seed list '" + text + "' (use 42-51 or 1,2,3)");
    };
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
