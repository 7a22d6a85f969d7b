// Table-driven tests of the quota engine's cycle: ordering, admission, reclaim, priority
// preemption, gang, backfill, class-to-form choice and repartitioning, each checking the reason
// a job waits. Every engine checks its invariants after every step.
#include <gtest/gtest.h>

#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "sched/quota/engine.h"
#include "sched/quota/policy_model.h"

namespace tessera::quota {
namespace {

constexpr MiB kGiB = 1024;
using F = AllocationForm;
using C = WorkloadClass;

Resources Gpu(int64_t milli) { return Resources{milli, 0, 0, 0}; }

// A small world: pools per form, two groups, queues per class.
PolicySpec BasePolicy() {
  PolicySpec p;
  p.pools = {{"train", {F::kWhole}},
             {"infer", {F::kPartition}},
             {"inter", {F::kShare}},
             {"any", {F::kWhole, F::kPartition, F::kShare}}};
  p.groups = {{"a", "", Gpu(0), UnlimitedResources(), 1000, "", false},
              {"b", "", Gpu(0), UnlimitedResources(), 1000, "", false}};
  p.profiles = {
      {"gpu1", 1, kWholeGpu, 0, 1000, 1024, {}, {}},
      {"part8", 1, 100, 8 * kGiB, 1000, 1024, {}, {}},
      {"share16", 1, 200, 16 * kGiB, 500, 1024, {}, {}},
  };
  p.queues = {
      {"train", "gpu1", {"a", "b"}, 0, false, C::kTraining},
      {"train-lo", "gpu1", {"a", "b"}, 0, true, C::kTraining},
      {"train-hi", "gpu1", {"a", "b"}, 10, false, C::kTraining},
      {"infer", "part8", {"a", "b"}, 0, true, C::kInference},
      {"inter", "share16", {"a", "b"}, 0, true, C::kInteractive},
  };
  return p;
}

NodeSpec Node(const std::string& name, const std::string& pool, int gpus,
              const std::string& model = "A100-80GB") {
  NodeSpec n;
  n.name = name;
  n.pool = pool;
  n.cpu_milli = 64000;
  n.memory_mib = 512 * kGiB;
  n.gpu_model = model;
  n.gpu_count = gpus;
  return n;
}

JobSpec Job(const std::string& id, const std::string& queue, const std::string& group,
            int count = 1, int64_t walltime = 0) {
  JobSpec j;
  j.id = id;
  j.identity = "user-" + id;
  j.queue = queue;
  j.group = group;
  if (count != 1) j.gpu_count = count;
  j.walltime_s = walltime;
  return j;
}

struct World {
  std::unique_ptr<QuotaEngine> e;
  std::map<std::string, int> h;

  World(const PolicySpec& p, const std::vector<NodeSpec>& nodes) {
    auto r = QuotaEngine::Create(p, nodes, {.check_invariants_each_step = true});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    e = std::move(r).value();
  }
  void Submit(const JobSpec& j, int64_t t) {
    auto r = e->Submit(j, t);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    h[j.id] = *r;
  }
  JobState State(const std::string& id) const { return e->job_state(h.at(id)); }
  JobView View(const std::string& id) const { return e->job(h.at(id)); }
  void Done() const {
    EXPECT_TRUE(e->CheckInvariants().ok()) << e->CheckInvariants().ToString();
    EXPECT_TRUE(e->violations().empty()) << e->violations().front();
  }
  int Count(EventKind k) const {
    int n = 0;
    for (const Event& ev : e->events()) n += ev.kind == k ? 1 : 0;
    return n;
  }
};

// ---------------------------------------------------------------------------------------------
// Policy validation

TEST(QuotaPolicy, ValidationNamesTheField) {
  struct Case {
    std::string name;
    std::function<void(PolicySpec&)> edit;
    std::string want;
  };
  std::vector<Case> cases = {
      {"reservation above limit",
       [](PolicySpec& p) {
         p.groups[0].limit = Gpu(1000);
         p.groups[0].reservation = Gpu(2000);
       },
       "groups[a].reservation.gpu exceeds its limit"},
      {"unknown parent", [](PolicySpec& p) { p.groups[1].parent = "zzz"; },
       "groups[b].parent 'zzz' is not a group"},
      {"unknown grandparent, listed after its grandchild",
       [](PolicySpec& p) {
         p.groups[0].parent = "b";
         p.groups[1].parent = "zzz";
       },
       "groups[b].parent 'zzz' is not a group"},
      {"children above parent",
       [](PolicySpec& p) {
         p.groups.push_back({"dept", "", Gpu(1000), UnlimitedResources(), 1000, "", false});
         p.groups[0].parent = "dept";
         p.groups[0].reservation = Gpu(800);
         p.groups[1].parent = "dept";
         p.groups[1].reservation = Gpu(800);
       },
       "groups[dept].reservation.gpu is below the sum of its children's reservations"},
      {"queue profile", [](PolicySpec& p) { p.queues[0].profile = "nope"; },
       "queues[train].profile 'nope' is not a profile"},
      {"queue group", [](PolicySpec& p) { p.queues[0].groups = {"c"}; },
       "queues[train].groups: 'c' is not a group"},
      {"profile pool", [](PolicySpec& p) { p.profiles[0].pools = {"gone"}; },
       "profiles[gpu1].pools: 'gone' is not a pool"},
      {"fraction with count", [](PolicySpec& p) { p.profiles[1].gpu_count = 2; },
       "profiles[part8].gpu_fraction: a fraction needs gpu_count 1"},
      {"class with no acceptable form",
       [](PolicySpec& p) {
         p.profiles[0].forms = {F::kShare};
         p.profiles[0].gpu_memory_mib = 1024;
       },
       "queues[train].class: class training allows whole but profile 'gpu1' accepts share"},
      {"share without a cap", [](PolicySpec& p) { p.profiles[0].forms = {F::kShare}; },
       "profiles[gpu1].gpu_memory: a share needs a memory cap"},
      {"max_gpus below gpus",
       [](PolicySpec& p) {
         p.profiles[0].max_gpus = 1;
         p.profiles[0].gpu_count = 2;
       },
       "profiles[gpu1].max_gpus is below gpus"},
      {"weight", [](PolicySpec& p) { p.groups[1].weight_milli = 0; },
       "groups[b].weight must be positive"},
  };
  for (const Case& c : cases) {
    PolicySpec p = BasePolicy();
    c.edit(p);
    Status s = Validate(p);
    EXPECT_FALSE(s.ok()) << c.name;
    EXPECT_NE(s.message().find(c.want), std::string::npos) << c.name << ": " << s.message();
  }
  EXPECT_TRUE(Validate(BasePolicy()).ok());
}

// ---------------------------------------------------------------------------------------------
// Class to form

TEST(QuotaForms, ClassChoosesTheForm) {
  struct Case {
    std::string name;
    std::string queue;
    std::optional<C> cls;
    std::optional<F> asked;
    bool override_inference_to_share;
    std::optional<F> want_form;  // nullopt: rejected
    std::string want_slot;       // partition name prefix
    std::string want_reject;
  };
  std::vector<Case> cases = {
      {"training gets a whole device", "train", {}, {}, false, F::kWhole, "", ""},
      {"inference gets the smallest covering MIG profile",
       "infer",
       {},
       {},
       false,
       F::kPartition,
       "1g.10gb",
       ""},
      {"interactive gets a capped share", "inter", {}, {}, false, F::kShare, "", ""},
      {"ci class through an override gets a share", "inter", C::kCi, {}, false, F::kShare, "", ""},
      {"a user cannot pick a form the policy forbids",
       "inter",
       {},
       F::kWhole,
       false,
       {},
       "",
       "form whole is not allowed for class interactive"},
      {"policy override sends inference to shares", "infer", {}, {}, true, F::kShare, "", ""},
  };
  for (const Case& c : cases) {
    PolicySpec p = BasePolicy();
    if (c.override_inference_to_share) {
      p.class_forms.table[static_cast<int>(C::kInference)] = {F::kShare};
    }
    World w(p, {Node("n0", "any", 4)});
    JobSpec j = Job("j", c.queue, "a");
    j.cls = c.cls;
    j.form = c.asked;
    auto r = w.e->Submit(j, 0);
    if (!c.want_form) {
      ASSERT_FALSE(r.ok()) << c.name;
      EXPECT_NE(r.status().message().find(c.want_reject), std::string::npos)
          << c.name << ": " << r.status().message();
      EXPECT_EQ(w.e->events().back().kind, EventKind::kRejected);
      continue;
    }
    ASSERT_TRUE(r.ok()) << c.name << ": " << r.status().ToString();
    w.e->RunCycle(0);
    JobView v = w.e->job(*r);
    ASSERT_EQ(v.state, JobState::kRunning) << c.name << ": " << v.wait_reason;
    EXPECT_EQ(*v.form, *c.want_form) << c.name;
    if (!c.want_slot.empty()) {
      EXPECT_EQ(v.grants[0].slot.rfind(c.want_slot, 0), 0u) << c.name;
    }
    if (*v.form == F::kShare) {
      EXPECT_EQ(v.grants[0].memory, c.override_inference_to_share ? 8 * kGiB : 16 * kGiB);
    }
    w.Done();
  }
}

// Amounts past 2^40 (or past 4096 GPUs, or a walltime past ten years) are refused: times the
// GPU count and summed into usage they would overflow, and a negative product passes every
// capacity and limit check.
TEST(QuotaPolicy, HugeAmountsAreRefused) {
  World w(BasePolicy(), {Node("n0", "any", 4)});
  struct Case {
    const char* name;
    std::function<void(JobSpec&)> set;
    const char* want;
  };
  const Case cases[] = {
      {"cpu", [](JobSpec& j) { j.cpu_milli = INT64_MAX; }, "above 2^40"},
      {"memory", [](JobSpec& j) { j.memory_mib = (int64_t{1} << 40) + 1; }, "above 2^40"},
      {"gpu memory", [](JobSpec& j) { j.gpu_memory_mib = int64_t{1} << 50; }, "above 2^40"},
      {"gpus", [](JobSpec& j) { j.gpu_count = 5000; }, "more than 4096 GPUs"},
      {"walltime", [](JobSpec& j) { j.walltime_s = INT64_MAX; }, "ten years"},
  };
  for (const Case& c : cases) {
    JobSpec j = Job(std::string("huge-") + c.name, "train", "a");
    c.set(j);
    auto r = w.e->Submit(j, 0);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.name << ": " << r.status().message();
  }
  JobSpec fine = Job("fine", "train", "a");
  fine.cpu_milli = int64_t{1} << 40;
  EXPECT_TRUE(w.e->Submit(fine, 0).ok()) << "2^40 itself is allowed (it waits: no node holds it)";
}

// What its group's limits could never allow is refused at submission, naming the resource (it
// once waited forever with no reason saying so); a request larger than any node present waits
// with a reason that says so (a larger node may join). Broken on purpose, either waits silently.
TEST(QuotaPolicy, ImpossibleRequestsAreRefusedOrSayWhyTheyWait) {
  PolicySpec p = BasePolicy();
  p.groups.push_back({"small", "", Gpu(0), Resources{2000, 0, 16000, 64 * kGiB}, 1000, "", false});
  p.groups.push_back({"team", "small", Gpu(0), UnlimitedResources(), 1000, "", false});
  for (QueueSpec& q : p.queues) {
    q.groups.push_back("small");
    q.groups.push_back("team");
  }
  World w(p, {Node("n0", "any", 4)});
  struct Case {
    const char* name;
    const char* group;
    std::function<void(JobSpec&)> set;
    const char* want;
  };
  const Case cases[] = {
      {"gpus past the limit", "small", [](JobSpec& j) { j.gpu_count = 3; },
       "group 'small' may hold at most"},
      {"cpu past the limit", "small", [](JobSpec& j) { j.cpu_milli = 32000; }, "of cpu at once"},
      {"memory past the limit", "small", [](JobSpec& j) { j.memory_mib = 128 * kGiB; },
       "of memory at once"},
      {"a parent's limit", "team", [](JobSpec& j) { j.gpu_count = 3; },
       "group 'small' may hold at most"},
  };
  for (const Case& c : cases) {
    JobSpec j = Job(std::string("over-") + c.name, "train", c.group);
    c.set(j);
    auto r = w.e->Submit(j, 0);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.name << ": " << r.status().message();
  }
  JobSpec at_limit = Job("at-limit", "train", "small", 2);
  EXPECT_TRUE(w.e->Submit(at_limit, 0).ok()) << "exactly the limit may run";
  // Larger than any node: waits, and says so with the largest node's size.
  JobSpec cpu = Job("big-cpu", "train", "a");
  cpu.cpu_milli = 1000 * 1000;
  w.Submit(cpu, 0);
  JobSpec mem = Job("big-mem", "train", "a");
  mem.memory_mib = 10 * 1024 * 1024;
  w.Submit(mem, 0);
  w.e->RunCycle(1);
  EXPECT_EQ(w.State("big-cpu"), JobState::kPending);
  EXPECT_NE(w.View("big-cpu").wait_reason.find("larger than any node present: needs cpu"),
            std::string::npos)
      << w.View("big-cpu").wait_reason;
  EXPECT_NE(w.View("big-cpu").wait_reason.find("has 64"), std::string::npos)
      << w.View("big-cpu").wait_reason;
  EXPECT_NE(w.View("big-mem").wait_reason.find("larger than any node present: needs memory"),
            std::string::npos)
      << w.View("big-mem").wait_reason;
  w.Done();
}

TEST(QuotaForms, SharesCapsSumToDeviceMemory) {
  World w(BasePolicy(), {Node("n0", "inter", 2)});
  // 80 GiB devices take five 16 GiB caps each; the eleventh waits.
  for (int i = 0; i < 11; ++i) w.Submit(Job("s" + std::to_string(i), "inter", "a"), 0);
  w.e->RunCycle(0);
  int running = 0;
  for (int i = 0; i < 11; ++i) running += w.State("s" + std::to_string(i)) == JobState::kRunning;
  EXPECT_EQ(running, 10);
  EXPECT_EQ(w.View("s10").wait_step, "Placement");
  EXPECT_NE(w.View("s10").wait_reason.find("no room for 1 x share"), std::string::npos);
  EXPECT_EQ(w.e->devices_used_by_class()[static_cast<int>(C::kInteractive)], 2);
  w.Done();
}

// Swapping queues (swap_overcommit_percent): their shares' caps may sum past a device's memory,
// and a device holds shares of one kind only, so a share that cannot be swapped never sits where
// the memory is overcommitted.
TEST(QuotaForms, SwapSharesOvercommitTheirDeviceAndStayApartFromOthers) {
  PolicySpec p = BasePolicy();
  p.queues.push_back({"inter-swap", "share16", {"a", "b"}, 0, true, C::kInteractive});
  p.queues.back().swap_overcommit_percent = 200;
  NodeSpec node = Node("n0", "inter", 2);
  node.swap_mib = 200 * kGiB;  // host RAM + disk for the caps past the devices' memory
  World w(p, {node});
  w.Submit(Job("plain", "inter", "a"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("plain"), JobState::kRunning);
  const int plain_device = w.View("plain").grants[0].device;
  // Ten 16 GiB caps on the other 80 GiB device (160 GiB of caps, 2000 milli of weight); the
  // eleventh does not join the device that holds the plain share.
  for (int i = 0; i < 11; ++i) w.Submit(Job("s" + std::to_string(i), "inter-swap", "a"), 1);
  w.e->RunCycle(1);
  int running = 0;
  for (int i = 0; i < 11; ++i) {
    const std::string id = "s" + std::to_string(i);
    if (w.State(id) != JobState::kRunning) continue;
    ++running;
    EXPECT_NE(w.View(id).grants[0].device, plain_device);
  }
  EXPECT_EQ(running, 10);
  EXPECT_EQ(w.State("s10"), JobState::kPending);
  // The plain share leaves: its device takes swapping shares now, and a plain one waits.
  w.e->Complete(w.h.at("plain"), 2);
  w.e->RunCycle(2);
  EXPECT_EQ(w.State("s10"), JobState::kRunning);
  EXPECT_EQ(w.View("s10").grants[0].device, plain_device);
  w.Submit(Job("plain2", "inter", "b"), 3);
  w.e->RunCycle(3);
  EXPECT_EQ(w.State("plain2"), JobState::kPending);
  // Utilization counts an overcommitted device once.
  EXPECT_LE(w.e->allocated().gpu_milli, 2 * kWholeGpu);
  w.Done();
}

// The node's swap budget bounds the overcommit: caps past the devices' memory, summed over the
// node, stay within what its host RAM and disk can take.
TEST(QuotaForms, TheNodeSwapBudgetBoundsTheOvercommit) {
  PolicySpec p = BasePolicy();
  p.queues.push_back({"inter-swap", "share16", {"a", "b"}, 0, true, C::kInteractive});
  p.queues.back().swap_overcommit_percent = 200;
  for (auto [budget, want] : std::initializer_list<std::pair<MiB, int>>{{0, 10}, {48 * kGiB, 13}}) {
    NodeSpec node = Node("n0", "inter", 2);
    node.swap_mib = budget;
    World w(p, {node});
    for (int i = 0; i < 20; ++i) w.Submit(Job("s" + std::to_string(i), "inter-swap", "a"), 0);
    w.e->RunCycle(0);
    int running = 0;
    for (int i = 0; i < 20; ++i) running += w.State("s" + std::to_string(i)) == JobState::kRunning;
    // No budget: five per device, as without swapping; 48 GiB: three more past the memory.
    EXPECT_EQ(running, want) << "budget " << budget;
    w.Done();
  }
}

// ---------------------------------------------------------------------------------------------
// Ordering

TEST(QuotaOrdering, KeysInOrder) {
  struct Case {
    std::string name;
    std::function<void(World&)> setup;  // leaves exactly one free device and pending jobs
    std::string want_first;
  };
  std::vector<Case> cases = {
      {"queue priority first",
       [](World& w) {
         w.Submit(Job("lo", "train", "a"), 0);
         w.Submit(Job("hi", "train-hi", "a"), 5);
       },
       "hi"},
      {"groups below reservation before others",
       [](World& w) {
         w.Submit(Job("fromA", "train", "a"), 0);
         w.Submit(Job("fromB", "train", "b"), 5);  // b has a reservation, a none
       },
       "fromB"},
      {"submit time among equals",
       [](World& w) {
         w.Submit(Job("first", "train", "b"), 1);
         w.Submit(Job("second", "train", "a"), 3);
       },
       "first"},
  };
  for (const Case& c : cases) {
    PolicySpec p = BasePolicy();
    if (c.name.find("reservation") != std::string::npos) p.groups[1].reservation = Gpu(1000);
    World w(p, {Node("n0", "train", 1)});
    c.setup(w);
    w.e->RunCycle(10);
    EXPECT_EQ(w.State(c.want_first), JobState::kRunning) << c.name;
    w.Done();
  }
}

TEST(QuotaOrdering, FairShareFavoursTheGroupThatUsedLess) {
  PolicySpec p = BasePolicy();
  p.fair_share_half_life_s = 600;
  World w(p, {Node("n0", "train", 1)});
  w.Submit(Job("a-old", "train", "a"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("a-old"), JobState::kRunning);
  w.e->RunCycle(300);  // a accumulates usage
  w.e->Complete(w.h["a-old"], 300);
  w.Submit(Job("a-new", "train", "a"), 301);
  w.Submit(Job("b-new", "train", "b"), 302);  // later, but b used nothing
  w.e->RunCycle(310);
  EXPECT_EQ(w.State("b-new"), JobState::kRunning);
  EXPECT_EQ(w.State("a-new"), JobState::kPending);
  auto gs = w.e->groups();
  EXPECT_GT(gs[0].fair_share, 0.0);
  w.Done();
}

// ---------------------------------------------------------------------------------------------
// Admission

TEST(QuotaAdmission, GuaranteedBorrowedAndLimit) {
  PolicySpec p = BasePolicy();
  p.groups[0].reservation = Gpu(1000);
  p.groups[0].limit = Resources{2000, kUnlimited, kUnlimited, kUnlimited};
  World w(p, {Node("n0", "train", 4)});
  w.Submit(Job("j1", "train", "a"), 0);
  w.Submit(Job("j2", "train", "a"), 1);
  w.Submit(Job("j3", "train", "a"), 2);
  w.e->RunCycle(5);
  EXPECT_EQ(w.State("j1"), JobState::kRunning);
  EXPECT_FALSE(w.View("j1").borrowed);
  EXPECT_EQ(w.State("j2"), JobState::kRunning);
  EXPECT_TRUE(w.View("j2").borrowed);
  ASSERT_EQ(w.State("j3"), JobState::kPending);
  EXPECT_EQ(w.View("j3").wait_step, "Admission");
  EXPECT_EQ(w.View("j3").wait_reason, "group a at its gpu limit: holds 2, job needs 1, limit 2");
  std::vector<std::string> admitted;
  for (const Event& e : w.e->events()) {
    if (e.kind == EventKind::kAdmitted) admitted.push_back(e.detail.substr(0, 10));
  }
  EXPECT_EQ(admitted, (std::vector<std::string>{"guaranteed", "borrowed: "}));
  w.Done();
}

TEST(QuotaAdmission, ParentLimitBindsChildren) {
  PolicySpec p = BasePolicy();
  p.groups.push_back(
      {"dept", "", Gpu(0), Resources{1000, kUnlimited, kUnlimited, kUnlimited}, 1000, "", false});
  p.groups[0].parent = "dept";
  p.groups[1].parent = "dept";
  World w(p, {Node("n0", "train", 4)});
  w.Submit(Job("a1", "train", "a"), 0);
  w.Submit(Job("b1", "train", "b"), 1);
  w.e->RunCycle(5);
  EXPECT_EQ(w.State("a1"), JobState::kRunning);
  EXPECT_EQ(w.View("b1").wait_reason, "group dept at its gpu limit: holds 1, job needs 1, limit 1");
  w.Done();
}

// ---------------------------------------------------------------------------------------------
// Reclaim and priority preemption

// A card the engine split for one short inference job comes back whole once idle, when whole
// or share demand waits (it once stayed in MIG mode with an empty instance, and a 2-card job
// waited on an idle 2-card node for good). Broken on purpose (no unsplit), train2 never runs.
TEST(QuotaRepartition, AnIdleCardSplitForInferenceComesBackForWholeAndShareDemand) {
  PolicySpec p = BasePolicy();
  World w(p, {Node("n0", "any", 2)});
  w.Submit(Job("inf", "infer", "a"), 0);
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("inf"), JobState::kRunning);
  ASSERT_EQ(w.View("inf").form, F::kPartition);
  w.e->Complete(w.h["inf"], 60);
  w.Submit(Job("train2", "train", "b", 2), 61);
  w.e->RunCycle(61);
  w.e->RunCycle(62);
  EXPECT_EQ(w.State("train2"), JobState::kRunning) << w.View("train2").wait_reason;
  bool returned = false;
  for (const Event& e : w.e->events()) {
    returned =
        returned || (e.kind == EventKind::kRepartitioned &&
                     e.detail.find("MIG off on an idle device for train2") != std::string::npos);
  }
  EXPECT_TRUE(returned);
  // The same for a share after a partition.
  w.e->Complete(w.h["train2"], 100);
  w.Submit(Job("inf2", "infer", "a"), 101);
  w.e->RunCycle(101);
  ASSERT_EQ(w.View("inf2").form, F::kPartition);
  w.e->Complete(w.h["inf2"], 160);
  w.Submit(Job("nb1", "inter", "a"), 161);
  w.Submit(Job("nb2", "inter", "a"), 161);
  w.Submit(Job("whole", "train", "b"), 161);
  w.Submit(Job("whole2", "train", "b"), 161);
  w.e->RunCycle(161);
  w.e->RunCycle(162);
  EXPECT_EQ(w.State("nb1"), JobState::kRunning) << w.View("nb1").wait_reason;
  EXPECT_EQ(w.State("nb2"), JobState::kRunning) << w.View("nb2").wait_reason;
  w.Done();
}

TEST(QuotaReclaim, BelowReservationTakesBackFromBorrowersWithLeastLostWork) {
  PolicySpec p = BasePolicy();
  p.grace_seconds = 30;
  p.groups[0].reservation = Gpu(1000);
  World w(p, {Node("n0", "train", 2)});
  w.Submit(Job("b-old", "train-lo", "b"), 0);
  w.e->RunCycle(0);
  w.Submit(Job("b-young", "train-lo", "b"), 100);
  w.e->RunCycle(100);
  ASSERT_EQ(w.State("b-young"), JobState::kRunning);
  w.Submit(Job("a1", "train", "a"), 200);
  w.e->RunCycle(200);
  EXPECT_EQ(w.State("b-young"), JobState::kTerminating);  // less work lost than b-old
  EXPECT_EQ(w.State("b-old"), JobState::kRunning);
  EXPECT_EQ(w.View("a1").wait_step, "Reclaim");
  EXPECT_NE(w.View("a1").wait_reason.find("reclaiming capacity from borrowers; back by t=230s"),
            std::string::npos);
  w.e->RunCycle(215);  // within grace: still waiting, nobody else takes the device
  EXPECT_NE(w.View("a1").wait_reason.find("waiting for 1 preempted job"),
            std::string::npos);  // within grace: still waiting, nobody else takes the device
  w.Submit(Job("b-3", "train-lo", "b"), 216);
  w.e->RunCycle(230);  // grace over: one cycle later it runs
  EXPECT_EQ(w.State("a1"), JobState::kRunning);
  EXPECT_EQ(w.State("b-young"), JobState::kPending);
  EXPECT_EQ(w.View("b-young").preemptions, 1);
  bool saw = false;
  for (const Event& e : w.e->events()) {
    if (e.kind == EventKind::kPreempted) {
      saw = true;
      EXPECT_NE(e.detail.find("reclaim: group a is below its reservation"), std::string::npos);
    }
  }
  EXPECT_TRUE(saw);
  w.Done();
}

// Reclaim stops at the reservation, counting claims in flight (jobs granted preempted capacity
// that wait out the grace) and capacity already leaving: 22 jobs against a reservation of 16 on
// a full cluster preempt exactly 16 borrowers, and the borrowing group keeps the rest (it once
// preempted 22). Broken on purpose (claims in flight not counted), the count is 22.
TEST(QuotaReclaim, ReclaimStopsAtTheReservationCountingClaimsInFlight) {
  PolicySpec p = BasePolicy();
  p.grace_seconds = 30;
  p.groups[0].reservation = Gpu(16000);
  World w(p, {Node("n0", "train", 8), Node("n1", "train", 8), Node("n2", "train", 8),
              Node("n3", "train", 8)});
  for (int i = 0; i < 32; ++i) w.Submit(Job("b" + std::to_string(i), "train-lo", "b"), 0);
  w.e->RunCycle(0);
  for (int i = 0; i < 32; ++i) ASSERT_EQ(w.State("b" + std::to_string(i)), JobState::kRunning);
  for (int i = 0; i < 22; ++i) w.Submit(Job("a" + std::to_string(i), "train", "a"), 100);
  for (int64_t t = 100; t <= 100 + 3 * 31; t += 31) w.e->RunCycle(t);  // past the grace, twice
  EXPECT_EQ(w.Count(EventKind::kPreempted), 16);
  int a_running = 0, b_running = 0;
  for (int i = 0; i < 22; ++i) a_running += w.State("a" + std::to_string(i)) == JobState::kRunning;
  for (int i = 0; i < 32; ++i) b_running += w.State("b" + std::to_string(i)) == JobState::kRunning;
  EXPECT_EQ(a_running, 16);
  EXPECT_EQ(b_running, 16);
  w.Done();
}

TEST(QuotaReclaim, NoReclaimFromNonPreemptibleOrAboveReservation) {
  struct Case {
    std::string name;
    std::string borrower_queue;
    int64_t a_reservation;
    std::string want_step;
  };
  std::vector<Case> cases = {
      {"borrower not preemptible", "train", 1000, "Placement"},
      {"claimant above its reservation", "train-lo", 0, "Placement"},
  };
  for (const Case& c : cases) {
    PolicySpec p = BasePolicy();
    p.groups[0].reservation = Gpu(c.a_reservation);
    World w(p, {Node("n0", "train", 1)});
    w.Submit(Job("b1", c.borrower_queue, "b"), 0);
    w.e->RunCycle(0);
    w.Submit(Job("a1", "train", "a"), 10);
    w.e->RunCycle(10);
    EXPECT_EQ(w.State("b1"), JobState::kRunning) << c.name;
    EXPECT_EQ(w.View("a1").wait_step, c.want_step) << c.name;
    EXPECT_NE(w.View("a1").wait_reason.find("no room for 1 x whole"), std::string::npos)
        << c.name << ": " << w.View("a1").wait_reason;
    w.Done();
  }
}

TEST(QuotaPreemption, PriorityInsideTheGroup) {
  struct Case {
    std::string name;
    std::string victim_queue, victim_group;
    bool want_preempted;
  };
  std::vector<Case> cases = {
      {"lower priority preemptible, same group", "train-lo", "a", true},
      {"lower priority but not preemptible", "train", "a", false},
      {"other group is not touched by priority", "train-lo", "b", false},
  };
  for (const Case& c : cases) {
    World w(BasePolicy(), {Node("n0", "train", 1)});
    w.Submit(Job("v", c.victim_queue, c.victim_group), 0);
    w.e->RunCycle(0);
    w.Submit(Job("hi", "train-hi", "a"), 10);
    w.e->RunCycle(10);
    EXPECT_EQ(w.State("hi") == JobState::kRunning, c.want_preempted) << c.name;
    if (!c.want_preempted) {
      EXPECT_EQ(w.View("hi").wait_step, "Placement") << c.name;
    } else {
      EXPECT_EQ(w.View("v").wait_reason, "requeued after preemption");
    }
    w.Done();
  }
}

// ---------------------------------------------------------------------------------------------
// Gang

TEST(QuotaGang, AllOrNothingAcrossNodes) {
  World w(BasePolicy(), {Node("n0", "train", 4), Node("n1", "train", 4)});
  w.Submit(Job("one", "train", "a"), 0);
  w.e->RunCycle(0);
  w.Submit(Job("gang8", "train", "a", 8), 1);
  w.e->RunCycle(1);
  ASSERT_EQ(w.State("gang8"), JobState::kPending);
  EXPECT_EQ(w.View("gang8").wait_step, "Placement");
  EXPECT_NE(w.View("gang8").wait_reason.find("gang across nodes, all or nothing"),
            std::string::npos);
  EXPECT_EQ(w.e->allocated().gpu_milli, 1000);  // nothing partially held
  w.e->Complete(w.h["one"], 2);
  w.e->RunCycle(3);
  ASSERT_EQ(w.State("gang8"), JobState::kRunning);
  std::set<std::string> nodes;
  for (const GrantView& g : w.View("gang8").grants) nodes.insert(g.node);
  EXPECT_EQ(nodes.size(), 2u);
  EXPECT_EQ(w.View("gang8").grants.size(), 8u);
  w.Done();
}

// ---------------------------------------------------------------------------------------------
// Backfill

TEST(QuotaBackfill, SmallJobsRunOnlyWhenTheyEndBeforeTheHeadStarts) {
  struct Case {
    std::string name;
    int64_t small_walltime;  // 0 = not declared
    bool want_backfilled;
  };
  std::vector<Case> cases = {
      {"ends before the head's start", 50, true},
      {"would delay the head", 500, false},
      {"no walltime declared", 0, false},
  };
  for (const Case& c : cases) {
    World w(BasePolicy(), {Node("n0", "train", 4)});
    w.Submit(Job("big-running", "train", "a", 2, 100), 0);
    w.e->RunCycle(0);
    w.Submit(Job("head", "train-hi", "a", 4, 100), 1);
    w.Submit(Job("small", "train", "b", 1, c.small_walltime), 2);
    w.e->RunCycle(10);
    EXPECT_EQ(w.State("head"), JobState::kPending) << c.name;
    EXPECT_NE(w.View("head").wait_reason.find("keeps 4 device(s) on n0 expected free at t=100s"),
              std::string::npos)
        << w.View("head").wait_reason;
    EXPECT_EQ(w.State("small") == JobState::kRunning, c.want_backfilled) << c.name;
    if (!c.want_backfilled) {
      EXPECT_EQ(w.View("small").wait_step, "Backfill") << c.name;
    }
    // The head starts when the running job ends, whatever was backfilled.
    w.e->Complete(w.h["big-running"], 100);
    if (c.want_backfilled) w.e->Complete(w.h["small"], 60);
    w.e->RunCycle(100);
    EXPECT_EQ(w.State("head"), JobState::kRunning) << c.name;
    w.Done();
  }
}

// ---------------------------------------------------------------------------------------------
// Repartitioning

TEST(QuotaRepartition, MigLayoutChangedWhenWorthIt) {
  struct Case {
    std::string name;
    std::string occupant_queue;  // holds the 7g.80gb instance
    int64_t occupant_age;        // seconds it has run when demand arrives
    std::string want_step;       // for the inference job after one cycle
    bool want_repartition;
  };
  std::vector<Case> cases = {
      {"preemptible occupant, little lost", "infer-big", 60, "Repartition", true},
      {"non-preemptible occupant", "infer-big-np", 60, "Placement", false},
      {"too much work lost for one small job", "infer-big", 100000, "Repartition", false},
  };
  for (const Case& c : cases) {
    PolicySpec p = BasePolicy();
    p.grace_seconds = 10;
    p.groups[0].reservation = Gpu(1000);  // a may take back from b
    p.profiles.push_back({"part80", 1, 1000, 70 * kGiB, 1000, 1024, {}, {}});
    p.queues.push_back({"infer-big", "part80", {"a", "b"}, 0, true, C::kInference});
    p.queues.push_back({"infer-big-np", "part80", {"a", "b"}, 0, false, C::kInference});
    NodeSpec n = Node("n0", "infer", 1);
    n.mig_layout = {"7g.80gb"};
    World w(p, {n});
    w.Submit(Job("big", c.occupant_queue, "b"), 0);
    w.e->RunCycle(0);
    ASSERT_EQ(w.State("big"), JobState::kRunning) << c.name;
    int64_t t = c.occupant_age;
    w.Submit(Job("small", "infer", "a"), t);
    w.e->RunCycle(t);
    EXPECT_EQ(w.View("small").wait_step, c.want_step)
        << c.name << ": " << w.View("small").wait_reason;
    w.e->RunCycle(t + 10);
    EXPECT_EQ(w.State("small") == JobState::kRunning, c.want_repartition)
        << c.name << ": " << w.View("small").wait_step << " " << w.View("small").wait_reason;
    if (c.want_repartition) {
      EXPECT_EQ(w.View("small").grants[0].slot.rfind("1g.10gb", 0), 0u);
      EXPECT_EQ(w.e->device_layout(0, 0).find("7g.80gb"), std::string::npos);
      bool saw = false;
      for (const Event& e : w.e->events()) {
        if (e.kind == EventKind::kRepartitioned &&
            e.detail.find("7g.80gb@0 -> ") != std::string::npos) {
          saw = true;
          EXPECT_NE(e.detail.find("lost work"), std::string::npos);
        }
      }
      EXPECT_TRUE(saw) << c.name;
    } else if (c.want_step == "Repartition") {
      EXPECT_NE(w.View("small").wait_reason.find("more than the demand served"), std::string::npos)
          << w.View("small").wait_reason;
    }
    w.Done();
  }
}

TEST(QuotaRepartition, IdleDeviceIsSplitAndFreeSlicesAreUsed) {
  World w(BasePolicy(), {Node("n0", "infer", 1)});
  for (int i = 0; i < 8; ++i) w.Submit(Job("i" + std::to_string(i), "infer", "a"), 0);
  w.e->RunCycle(0);
  int running = 0;
  for (int i = 0; i < 8; ++i) running += w.State("i" + std::to_string(i)) == JobState::kRunning;
  EXPECT_EQ(running, 7);  // seven 1g.10gb on an A100-80GB
  EXPECT_EQ(w.View("i7").wait_step, "Placement");
  w.Done();
}

TEST(QuotaRepartition, AmdMemoryModeChangeDrainsTheNode) {
  PolicySpec p = BasePolicy();
  p.groups[0].reservation = Gpu(1000);  // a is within reservation; b borrows
  p.profiles.push_back({"part90", 1, 250, 90 * kGiB, 1000, 1024, {}, {}});
  p.queues.push_back({"infer-90", "part90", {"a"}, 0, true, C::kInference});
  NodeSpec n = Node("mi", "infer", 2, "MI300X");
  n.amd_mode = "CPX+NPS4";
  World w(p, {n});
  w.Submit(Job("small", "infer", "b"), 0);  // lands on a CPX partition
  w.e->RunCycle(0);
  ASSERT_EQ(w.State("small"), JobState::kRunning);
  w.Submit(Job("big", "infer-90", "a"), 10);
  w.e->RunCycle(10);
  // 90 GiB needs DPX+NPS1: a memory-mode change, so both devices of the node drain.
  EXPECT_EQ(w.State("big"), JobState::kRunning) << w.View("big").wait_reason;
  EXPECT_EQ(w.e->device_layout(0, 0), "DPX+NPS1");
  EXPECT_EQ(w.e->device_layout(0, 1).find("NPS1") != std::string::npos, true);
  EXPECT_EQ(w.State("small"), JobState::kPending);
  bool saw = false;
  for (const Event& e : w.e->events()) {
    saw = saw || (e.kind == EventKind::kRepartitioned &&
                  e.detail.find("node-wide memory mode") != std::string::npos);
  }
  EXPECT_TRUE(saw);
  w.Done();
}

// Found by fuzz/api_requests_fuzz: two agents registering absurd amounts overflowed the
// cluster's totals; amounts past 2^40 are refused.
TEST(QuotaNodes, AmountsPastTwoToTheFortyAreRefused) {
  World w(BasePolicy(), {Node("n0", "train", 2)});
  NodeSpec huge = Node("n1", "train", 1);
  huge.cpu_milli = 9000000000000000000;
  auto r = w.e->AddNode(huge, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("above 2^40"), std::string::npos) << r.status().message();
  huge.cpu_milli = 64000;
  huge.gpu_memory_mib = (int64_t{1} << 40) + 1;
  EXPECT_FALSE(w.e->AddNode(huge, 0).ok());
  huge.gpu_memory_mib = 0;
  huge.memory_mib = int64_t{1} << 40;
  EXPECT_TRUE(w.e->AddNode(huge, 0).ok());
  w.Done();
}

// A node registering again with a changed inventory that is refused (here an unknown pool)
// changes nothing: the node still takes work and the totals are as before. Accepted, the old
// inventory leaves the totals and the new one enters.
TEST(QuotaNodes, ARefusedChangeOfInventoryChangesNothing) {
  World w(BasePolicy(), {Node("n0", "train", 2)});
  const MiB before = w.e->gpu_memory_capacity();
  NodeSpec typo = Node("n0", "typo", 2);
  auto r = w.e->AddNode(typo, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a pool"), std::string::npos) << r.status().message();
  EXPECT_EQ(w.e->gpu_memory_capacity(), before);
  auto id = w.e->Submit(Job("still", "train", "a", 2), 0);
  ASSERT_TRUE(id.ok()) << id.status().message();
  w.e->RunCycle(0);
  EXPECT_EQ(w.e->job(*id).state, JobState::kRunning) << "n0 still takes work";
  w.e->Cancel(*id, 1, "done");

  ASSERT_TRUE(w.e->AddNode(Node("n0", "train", 4), 2).ok());
  EXPECT_EQ(w.e->gpu_memory_capacity(), before * 2) << "the old two devices out, the new four in";
  w.Done();
}

TEST(QuotaSubmit, NeverSchedulableIsRejected) {
  World w(BasePolicy(), {Node("n0", "train", 2)});
  auto r = w.e->Submit(Job("huge", "train", "a", 4), 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("never schedulable: wants 4 devices"), std::string::npos);
  auto r2 = w.e->Submit(Job("nogroup", "train", "zzz"), 0);
  EXPECT_NE(r2.status().message().find("group 'zzz' may not use queue 'train'"), std::string::npos);
}

}  // namespace
}  // namespace tessera::quota

namespace tessera::quota {
namespace {

// ---------------------------------------------------------------------------------------------
// External pools (Kubernetes): capacity from the cluster, reclaim by preemption (suspension)

TEST(QuotaExternal, APoolAtItsCapacityAdmitsNoMoreAndReclaimsFromBorrowers) {
  PolicySpec p = BasePolicy();
  p.groups[0].reservation = Gpu(0);     // a: borrows
  p.groups[1].reservation = Gpu(2000);  // b: 2 cards guaranteed
  p.queues.push_back({"k8s", "gpu1", {"a", "b"}, 0, true, C::kTraining});
  p.queues.back().external = true;
  p.queues.back().external_pool = "kubernetes";
  p.queues.push_back({"slurm", "gpu1", {"a", "b"}, 0, true, C::kTraining});
  p.queues.back().external = true;  // no pool: unbounded, never preempted
  auto r = QuotaEngine::Create(p, {}, {.check_invariants_each_step = true, .await_stop = true});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  World w(p, {});
  w.e = std::move(r).value();
  // Before the cluster reports its capacity, admission is bounded by limits only.
  w.Submit(Job("a1", "k8s", "a"), 0);
  w.e->RunCycle(1);
  EXPECT_EQ(w.State("a1"), JobState::kRunning);
  w.e->SetExternalCapacity("kubernetes", 4000);
  for (const char* id : {"a2", "a3", "a4", "a5"}) w.Submit(Job(id, "k8s", "a"), 2);
  w.Submit(Job("s1", "slurm", "a"), 2);
  w.e->RunCycle(3);
  EXPECT_EQ(w.State("a4"), JobState::kRunning);
  EXPECT_EQ(w.State("a5"), JobState::kPending);  // the pool is full
  EXPECT_EQ(w.View("a5").wait_step, "Placement");
  EXPECT_NE(w.View("a5").wait_reason.find("kubernetes has 4 GPU for this cluster, 4 held"),
            std::string::npos)
      << w.View("a5").wait_reason;
  EXPECT_EQ(w.State("s1"), JobState::kRunning);  // another scheduler's capacity is not this pool's
  w.Submit(Job("cpu", "k8s", "a", 0), 3);        // no GPU asked: a full pool does not hold it back
  w.e->RunCycle(3);
  EXPECT_EQ(w.State("cpu"), JobState::kRunning);
  EXPECT_EQ(w.Count(EventKind::kPreempted), 0);
  // b is below its reservation: two of a's borrowed jobs are preempted (the server suspends them).
  w.Submit(Job("b1", "k8s", "b", 2), 4);
  w.e->RunCycle(5);
  EXPECT_EQ(w.State("b1"), JobState::kPending);
  EXPECT_EQ(w.View("b1").wait_step, "Reclaim");
  EXPECT_EQ(w.Count(EventKind::kPreempted), 2);
  std::vector<std::string> preempted;
  for (const char* id : {"a1", "a2", "a3", "a4"}) {
    if (w.State(id) == JobState::kTerminating) preempted.push_back(id);
  }
  ASSERT_EQ(preempted.size(), 2u);
  EXPECT_EQ(w.State("s1"), JobState::kRunning);  // never a victim: its pool has no capacity known
  // Until their pods are gone, the capacity is still held.
  w.e->RunCycle(6);
  EXPECT_EQ(w.State("b1"), JobState::kPending);
  for (const auto& id : preempted) w.e->Stopped(w.h[id], 7);
  w.e->RunCycle(8);
  EXPECT_EQ(w.State("b1"), JobState::kRunning);
  for (const auto& id : preempted)
    EXPECT_EQ(w.State(id), JobState::kPending);  // resumed when room returns
  // The cluster grows: the preempted jobs come back.
  w.e->SetExternalCapacity("kubernetes", 6000);
  w.e->RunCycle(9);
  for (const auto& id : preempted) EXPECT_EQ(w.State(id), JobState::kRunning);
  EXPECT_EQ(w.State("a5"), JobState::kPending);
  w.Done();
}

}  // namespace
}  // namespace tessera::quota
