// Tests of the quota engine's policy: validation (the field named, amounts too large, requests
// no limit could allow), the choice of a form for a class, and the order of the queue. Every
// engine checks its invariants after every step.
#include <gtest/gtest.h>

#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "quota_world.h"
#include "sched/quota/engine.h"
#include "sched/quota/policy_model.h"

namespace tessera::quota {
namespace {

using namespace quota_world;  // the small world of tests/sched/quota_world.h

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
  p.groups.push_back(
      {"small", "", Gpu(0), Resources{2000, kUnlimited, 16000, 64 * kGiB}, 1000, "", false});
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
  // With every node of its pools down (lost, cordoned), a job is not "larger than any node
  // present ... has 0": no node takes new work, and it says so.
  w.e->SetNodeDown("n0", true);
  JobSpec small = Job("small-one", "train", "a");
  w.Submit(small, 2);
  w.e->RunCycle(2);
  EXPECT_EQ(w.State("small-one"), JobState::kPending);
  EXPECT_NE(w.View("small-one")
                .wait_reason.find("no node in pools [train,infer,inter,any] takes new work"),
            std::string::npos)
      << w.View("small-one").wait_reason;
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

// A swapping queue overcommits a device before it opens another (docs/scheduling.md, "Swapping
// queues"): whatever placement policy picks the first device, the shares that follow pack onto
// it, past its memory, while its overcommit and the node's swap budget allow. (The placement core
// fits caps in physical memory: with `placement: tessera` the sixth share once went to the
// second node, and the overcommit was used only once every device was full.)
TEST(QuotaForms, SwapSharesPackOntoOneDeviceBeforeOpeningAnother) {
  // (fgd was listed here too, and ran as next-fit: the cycle has no workload mix up front for
  // it, and such a placement is now refused by name.)
  for (const char* placement : {"tessera", "packing", "bestfit", "nextfit"}) {
    PolicySpec p = BasePolicy();
    p.placement = placement;
    p.queues.push_back({"inter-swap", "share16", {"a", "b"}, 0, true, C::kInteractive});
    p.queues.back().swap_overcommit_percent = 200;
    std::vector<NodeSpec> nodes = {Node("n0", "inter", 1), Node("n1", "inter", 1)};
    for (NodeSpec& n : nodes) n.swap_mib = 200 * kGiB;
    World w(p, nodes);
    // Six 16 GiB caps (96 GiB) on 80 GiB cards: one card at 120% holds them all. Half arrive
    // together, half one per cycle.
    for (int i = 0; i < 3; ++i) w.Submit(Job("s" + std::to_string(i), "inter-swap", "a"), 0);
    w.e->RunCycle(0);
    for (int i = 3; i < 6; ++i) {
      w.Submit(Job("s" + std::to_string(i), "inter-swap", "a"), i);
      w.e->RunCycle(i);
    }
    std::set<std::string> cards;
    for (int i = 0; i < 6; ++i) {
      const std::string id = "s" + std::to_string(i);
      ASSERT_EQ(w.State(id), JobState::kRunning) << placement << " " << id;
      cards.insert(w.View(id).grants[0].node + "/" + std::to_string(w.View(id).grants[0].device));
    }
    EXPECT_EQ(cards.size(), 1u) << placement;
    EXPECT_EQ(w.e->devices_used_by_class()[static_cast<int>(C::kInteractive)], 1) << placement;
    // Ten fill the card at 200%; the eleventh opens the other card.
    for (int i = 6; i < 11; ++i) w.Submit(Job("s" + std::to_string(i), "inter-swap", "a"), 10);
    w.e->RunCycle(10);
    for (int i = 6; i < 11; ++i) ASSERT_EQ(w.State("s" + std::to_string(i)), JobState::kRunning);
    EXPECT_EQ(w.e->devices_used_by_class()[static_cast<int>(C::kInteractive)], 2) << placement;
    int on_first = 0;
    for (int i = 0; i < 11; ++i) {
      const GrantView g = w.View("s" + std::to_string(i)).grants[0];
      on_first += cards.count(g.node + "/" + std::to_string(g.device)) > 0;
    }
    EXPECT_EQ(on_first, 10) << placement;
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

}  // namespace
}  // namespace tessera::quota
