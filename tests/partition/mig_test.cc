#include "partition/mig.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace tessera::partition {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const GpuModel& Gpu(const char* name) {
  const GpuModel* m = Catalog::BuiltIn().Find(name);
  if (m == nullptr) ADD_FAILURE() << "no model " << name;
  return *m;
}

// ---- The source table (gpu-partitions.md section 2), restated for the placement tests. ----

struct ProfileClass {
  int compute_slices;
  int memory_slices;
  std::vector<int> starts;
  int max_instances;
  bool media_extension;
};

const ProfileClass k1g{1, 1, {0, 1, 2, 3, 4, 5, 6}, 7, false};
const ProfileClass k1gMe{1, 1, {0, 1, 2, 3, 4, 5, 6}, 1, true};
const ProfileClass k1g2m{1, 2, {0, 2, 4, 6}, 4, false};
const ProfileClass k2g{2, 2, {0, 2, 4}, 3, false};
const ProfileClass k3g{3, 4, {0, 4}, 2, false};
const ProfileClass k4g{4, 4, {0}, 1, false};
const ProfileClass k7g{7, 8, {0}, 1, false};

struct ModelTable {
  const char* model;
  int compute_slices;
  int memory_slices;
  // profile name -> class, in catalog order
  std::vector<std::pair<const char*, ProfileClass>> profiles;
};

std::vector<ModelTable> SourceTables() {
  auto eight = [](const char* model, const char* p1, const char* p1me, const char* p1g2m,
                  const char* p2, const char* p3, const char* p4, const char* p7) {
    return ModelTable{
        model,
        7,
        8,
        {{p1, k1g}, {p1me, k1gMe}, {p1g2m, k1g2m}, {p2, k2g}, {p3, k3g}, {p4, k4g}, {p7, k7g}}};
  };
  return {
      ModelTable{"A30-24GB",
                 4,
                 4,
                 {{"1g.6gb", {1, 1, {0, 1, 2, 3}, 4, false}},
                  {"1g.6gb+me", {1, 1, {0, 1, 2, 3}, 1, true}},
                  {"2g.12gb", {2, 2, {0, 2}, 2, false}},
                  {"2g.12gb+me", {2, 2, {0, 2}, 1, true}},
                  {"4g.24gb", {4, 4, {0}, 1, false}}}},
      eight("A100-40GB", "1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb",
            "7g.40gb"),
      eight("A100-80GB", "1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb",
            "7g.80gb"),
      eight("H100-80GB", "1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb",
            "7g.80gb"),
      eight("H100-NVL-94GB", "1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb",
            "7g.94gb"),
      eight("GH200-96GB", "1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb",
            "7g.96gb"),
      eight("GH200-144GB", "1g.18gb", "1g.18gb+me", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb",
            "7g.144gb"),
      eight("H200-141GB", "1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb",
            "7g.141gb"),
      eight("B200-180GB", "1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb",
            "7g.180gb"),
      eight("GB200-186GB", "1g.23gb", "1g.23gb+me", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb",
            "7g.186gb"),
      eight("B300-288GB", "1g.34gb", "1g.34gb+me", "1g.67gb", "2g.67gb", "3g.135gb", "4g.135gb",
            "7g.269gb"),
  };
}

TEST(MigPlacementTest, EveryMigModelIsInTheSourceTable) {
  size_t mig_models = 0;
  for (const GpuModel& m : Catalog::BuiltIn().models()) mig_models += m.is_mig() ? 1 : 0;
  EXPECT_EQ(mig_models, SourceTables().size());
}

TEST(MigPlacementTest, CatalogMatchesSourceTable) {
  for (const ModelTable& t : SourceTables()) {
    SCOPED_TRACE(t.model);
    const GpuModel& m = Gpu(t.model);
    EXPECT_EQ(m.mig.compute_slices, t.compute_slices);
    EXPECT_EQ(m.mig.memory_slices, t.memory_slices);
    ASSERT_EQ(m.mig.profiles.size(), t.profiles.size());
    for (size_t i = 0; i < t.profiles.size(); ++i) {
      const auto& [name, want] = t.profiles[i];
      const MigProfile& p = m.mig.profiles[i];
      SCOPED_TRACE(name);
      EXPECT_EQ(p.name, name);
      EXPECT_EQ(p.compute_slices, want.compute_slices);
      EXPECT_EQ(p.memory_slices, want.memory_slices);
      EXPECT_EQ(p.starts, want.starts);
      EXPECT_EQ(p.max_instances, want.max_instances);
      EXPECT_EQ(p.media_extension, want.media_extension);
    }
  }
}

TEST(MigPlacementTest, EngineAcceptsExactlyTheListedStartsOnAnEmptyDevice) {
  for (const ModelTable& t : SourceTables()) {
    const GpuModel& m = Gpu(t.model);
    for (const auto& [name, want] : t.profiles) {
      SCOPED_TRACE(std::string(t.model) + " " + name);
      Result<std::vector<int>> starts = LegalStarts(m, {}, name);
      ASSERT_TRUE(starts.ok()) << starts.status().ToString();
      EXPECT_EQ(*starts, want.starts);
      for (int s = 0; s < t.memory_slices; ++s) {
        bool listed = std::find(want.starts.begin(), want.starts.end(), s) != want.starts.end();
        Status st = CheckCreate(m, {}, {name, s});
        EXPECT_EQ(st.ok(), listed) << "start " << s << ": " << st.ToString();
      }
    }
  }
}

TEST(MigPlacementTest, EngineEnforcesMaxInstancesPerProfile) {
  for (const ModelTable& t : SourceTables()) {
    const GpuModel& m = Gpu(t.model);
    for (const auto& [name, want] : t.profiles) {
      SCOPED_TRACE(std::string(t.model) + " " + name);
      std::vector<std::string> wanted(static_cast<size_t>(want.max_instances), name);
      Result<MigPlan> fits = Plan(m, wanted);
      ASSERT_TRUE(fits.ok()) << fits.status().ToString();
      wanted.push_back(name);
      Result<MigPlan> over = Plan(m, wanted);
      ASSERT_FALSE(over.ok());
      EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
      // The cap or the room runs out first; either way the message says which.
      if (want.max_instances * want.memory_slices < t.memory_slices) {
        EXPECT_THAT(over.status().message(),
                    HasSubstr("wants " + std::to_string(want.max_instances + 1) + " x " + name +
                              ", at most " + std::to_string(want.max_instances) + " per GPU"));
      }
      // Creating them one by one stops at the same count.
      Layout layout;
      for (const Instance& i : fits->placed) ASSERT_TRUE(CreateInstance(m, &layout, i).ok());
      Result<std::vector<int>> more = LegalStarts(m, layout, name);
      ASSERT_TRUE(more.ok());
      EXPECT_TRUE(more->empty());
    }
  }
}

TEST(MigPlacementTest, A100KnownIllegalLayouts) {
  const GpuModel& a100 = Gpu("A100-40GB");
  // 4g.20gb starts only at 0.
  for (int s = 1; s < 8; ++s) {
    Status st = CheckCreate(a100, {}, {"4g.20gb", s});
    EXPECT_FALSE(st.ok()) << s;
    EXPECT_THAT(st.message(),
                HasSubstr("4g.20gb cannot start at memory slice " + std::to_string(s)));
    EXPECT_THAT(st.message(), HasSubstr("{0}"));
  }
  // Two 4g.20gb.
  Layout layout;
  ASSERT_TRUE(CreateInstance(a100, &layout, {"4g.20gb", 0}).ok());
  Status second = CheckCreate(a100, layout, {"4g.20gb", 0});
  EXPECT_EQ(second.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.message(), HasSubstr("at most 1 x 4g.20gb"));
  Result<MigPlan> two = Plan(a100, {"4g.20gb", "4g.20gb"});
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(two.status().message(), HasSubstr("wants 2 x 4g.20gb, at most 1 per GPU"));

  // A 1g.5gb at slice 4 blocks 3g.20gb at 4 (and only there).
  Layout one{{{"1g.5gb", 4}}};
  EXPECT_THAT(*LegalStarts(a100, one, "3g.20gb"), ElementsAre(0));
  Status blocked = CheckCreate(a100, one, {"3g.20gb", 4});
  EXPECT_THAT(blocked.message(), HasSubstr("3g.20gb@4 overlaps 1g.5gb@4 in memory slice 4"));
  // Anything in slices 0-3 kills 4g.
  for (int s = 0; s < 4; ++s) {
    EXPECT_TRUE(LegalStarts(a100, Layout{{{"1g.5gb", s}}}, "4g.20gb")->empty()) << s;
  }
  // 1g never at 7, 2g never at 6.
  EXPECT_FALSE(CheckCreate(a100, {}, {"1g.5gb", 7}).ok());
  EXPECT_FALSE(CheckCreate(a100, {}, {"2g.10gb", 6}).ok());

  // Two +me.
  Layout me{{{"1g.5gb+me", 0}}};
  Status two_me = CheckCreate(a100, me, {"1g.5gb+me", 1});
  EXPECT_FALSE(two_me.ok());
  Result<MigPlan> plan_me = Plan(a100, {"1g.5gb+me", "1g.5gb+me"});
  ASSERT_FALSE(plan_me.ok());
  EXPECT_THAT(plan_me.status().message(), HasSubstr("1g.5gb+me"));
}

TEST(MigPlacementTest, A30AllowsOneMediaExtensionOfEitherSize) {
  const GpuModel& a30 = Gpu("A30-24GB");
  Layout layout;
  ASSERT_TRUE(CreateInstance(a30, &layout, {"1g.6gb+me", 0}).ok());
  Status st = CheckCreate(a30, layout, {"2g.12gb+me", 2});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("second +me instance beside 1g.6gb+me@0"));
  EXPECT_TRUE(LegalStarts(a30, layout, "2g.12gb+me")->empty());
  EXPECT_THAT(*LegalStarts(a30, layout, "2g.12gb"), ElementsAre(2));

  Result<MigPlan> both = Plan(a30, {"2g.12gb+me", "1g.6gb+me"});
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(both.status().message(),
              HasSubstr("wants 2 +me instances (2g.12gb+me, 1g.6gb+me), at most 1 +me"));

  // A30 specifics: 4g.24gb only at 0, 2g.12gb at 0 or 2, four 1g at most, 4 compute slices.
  EXPECT_THAT(*LegalStarts(a30, {}, "4g.24gb"), ElementsAre(0));
  EXPECT_FALSE(CheckCreate(a30, {}, {"2g.12gb", 1}).ok());
  EXPECT_FALSE(CheckCreate(a30, {}, {"2g.12gb", 3}).ok());
  Result<MigPlan> mixed = Plan(a30, {"1g.6gb", "2g.12gb+me", "1g.6gb"});
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  Result<MigPlan> too_much = Plan(a30, {"4g.24gb", "1g.6gb"});
  ASSERT_FALSE(too_much.ok());
  EXPECT_THAT(too_much.status().message(), HasSubstr("wants 5 memory slices, A30-24GB has 4"));
  EXPECT_EQ(MaximalMultisets(a30).size(), 4u);  // 4g; 2g+2g; 2g+1g+1g; 4 x 1g
}

TEST(MigPlacementTest, CreateAndDestroy) {
  const GpuModel& h100 = Gpu("H100-80GB");
  Layout layout;
  ASSERT_TRUE(CreateInstance(h100, &layout, {"3G.40GB", 4}).ok());
  EXPECT_EQ(layout.instances[0].profile, "3g.40gb");  // canonical name kept
  EXPECT_EQ(CheckCreate(h100, layout, {"nope", 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DestroyInstance(h100, &layout, {"3g.40gb", 0}).code(), StatusCode::kNotFound);
  ASSERT_TRUE(DestroyInstance(h100, &layout, {"3g.40gb", 4}).ok());
  EXPECT_TRUE(layout.empty());
  // An illegal existing layout is reported, not trusted.
  Result<std::vector<int>> bad =
      LegalStarts(h100, Layout{{{"4g.40gb", 0}, {"1g.10gb", 1}}}, "1g.10gb");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("existing layout is not legal"));
}

// ---- Geometries ----

TEST(MigGeometryTest, EightSliceModelsHave77MultisetsAnd38Maximal) {
  int checked = 0;
  for (const GpuModel& m : Catalog::BuiltIn().models()) {
    if (!m.is_mig() || m.mig.memory_slices != 8) continue;
    SCOPED_TRACE(m.name);
    EXPECT_EQ(FittingMultisets(m).size(), 77u);
    EXPECT_EQ(MaximalMultisets(m).size(), 38u);
    ++checked;
  }
  EXPECT_EQ(checked, 10);
}

TEST(MigGeometryTest, GeometriesCountFragmentedLayouts) {
  const GpuModel& a100 = Gpu("A100-40GB");
  // 3g@0 + 1g.10gb@4 + 1g.5gb@6 leaves slice 7, which no 1g.5gb may take.
  std::vector<Geometry> geometries = MaximalGeometries(a100);
  bool found = false;
  for (const Geometry& g : geometries) {
    if (g.profiles == ProfileMultiset{"1g.5gb", "1g.10gb", "3g.20gb"}) {
      found = true;
      EXPECT_EQ(SliceMap(a100, g.example), "[3g.20gb           ][1g.10gb ][1g ].....");
    }
    // Each example is legal, maximal and holds exactly the multiset.
    Layout rebuilt;
    ProfileMultiset held;
    for (const Instance& i : g.example.instances) {
      ASSERT_TRUE(CreateInstance(a100, &rebuilt, i).ok());
      held.push_back(i.profile);
    }
    ProfileMultiset want = g.profiles;
    std::sort(held.begin(), held.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(held, want);
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(geometries.front().profiles, ProfileMultiset{"7g.40gb"});
}

TEST(MigGeometryTest, MaximalLayoutsAreLegalAndFull) {
  const GpuModel& a100 = Gpu("A100-40GB");
  std::vector<Layout> all = EnumerateLayouts(a100);
  std::vector<Layout> maximal = MaximalLayouts(a100);
  EXPECT_GT(all.size(), maximal.size());
  EXPECT_TRUE(all.front().empty());
  for (const Layout& l : maximal) {
    Layout rebuilt;
    for (const Instance& i : l.instances) {
      ASSERT_TRUE(CreateInstance(a100, &rebuilt, i).ok()) << l.ToString();
    }
    for (const MigProfile& p : a100.mig.profiles) {
      if (p.media_extension) continue;
      EXPECT_TRUE(LegalStarts(a100, l, p.name)->empty()) << l.ToString() << " + " << p.name;
    }
  }
  // Every maximal multiset is the multiset of some maximal layout.
  std::set<ProfileMultiset> from_layouts;
  for (const Layout& l : maximal) {
    ProfileMultiset s;
    for (const Instance& i : l.instances) s.push_back(i.profile);
    std::sort(s.begin(), s.end(), [&](const std::string& a, const std::string& b) {
      return a100.mig.ProfileIndex(a) < a100.mig.ProfileIndex(b);
    });
    from_layouts.insert(s);
  }
  std::vector<ProfileMultiset> multisets = MaximalMultisets(a100);
  EXPECT_EQ(std::set<ProfileMultiset>(multisets.begin(), multisets.end()), from_layouts);
}

TEST(MigGeometryTest, MediaExtensionProfilesCountWhenAsked) {
  const GpuModel& a100 = Gpu("A100-40GB");
  EXPECT_GT(FittingMultisets(a100, {.include_media_extension = true}).size(), 77u);
  for (const ProfileMultiset& s : MaximalMultisets(a100)) {
    for (const std::string& n : s) EXPECT_EQ(n.find("+me"), std::string::npos);
  }
}

// ---- Plan ----

void ExpectLegalPlan(const GpuModel& m, const std::vector<std::string>& wanted,
                     const MigPlan& plan) {
  ASSERT_EQ(plan.placed.size(), wanted.size());
  Layout rebuilt;
  for (size_t i = 0; i < wanted.size(); ++i) {
    EXPECT_EQ(plan.placed[i].profile, m.mig.FindProfile(wanted[i])->name);
    Status st = CreateInstance(m, &rebuilt, plan.placed[i]);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
}

TEST(MigPlanTest, FindsLayoutsInEveryOrder) {
  const GpuModel& h100 = Gpu("H100-80GB");
  std::vector<std::string> wanted = {"1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"};
  std::sort(wanted.begin(), wanted.end());
  int permutations = 0;
  do {
    Result<MigPlan> plan = Plan(h100, wanted);
    ASSERT_TRUE(plan.ok()) << ::testing::PrintToString(wanted) << plan.status().ToString();
    ExpectLegalPlan(h100, wanted, *plan);
    ++permutations;
  } while (std::next_permutation(wanted.begin(), wanted.end()));
  EXPECT_EQ(permutations, 12);
}

TEST(MigPlanTest, PlansEveryMaximalGeometryOfEveryModel) {
  for (const GpuModel& m : Catalog::BuiltIn().models()) {
    if (!m.is_mig()) continue;
    for (const ProfileMultiset& s : MaximalMultisets(m)) {
      std::vector<std::string> reversed(s.rbegin(), s.rend());
      Result<MigPlan> plan = Plan(m, reversed);
      ASSERT_TRUE(plan.ok()) << m.name << " " << plan.status().ToString();
      ExpectLegalPlan(m, reversed, *plan);
    }
  }
}

TEST(MigPlanTest, PlansBesideExistingInstances) {
  const GpuModel& a100 = Gpu("A100-40GB");
  Layout existing{{{"1g.5gb", 4}}};
  Result<MigPlan> plan = Plan(a100, {"3g.20gb"}, existing);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->placed[0], (Instance{"3g.20gb", 0}));
  EXPECT_EQ(plan->layout.instances.size(), 2u);

  Result<MigPlan> blocked = Plan(a100, {"4g.20gb"}, Layout{{{"1g.5gb", 1}}});
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.status().message(),
            "no legal layout on A100-40GB: 4g.20gb (starts none free) cannot be placed: "
            "memory slices are taken by existing 1g.5gb@1");
  Result<MigPlan> capped = Plan(a100, {"4g.20gb"}, Layout{{{"4g.20gb", 0}}});
  ASSERT_FALSE(capped.ok());
  EXPECT_THAT(capped.status().message(),
              HasSubstr("wants 1 x 4g.20gb, 1 already present, at most 1 per GPU"));
}

TEST(MigPlanTest, FailureMessagesNameTheConflict) {
  const GpuModel& a100 = Gpu("A100-40GB");
  struct Case {
    std::vector<std::string> wanted;
    std::string message;
    StatusCode code;
  };
  // On the 8-slice table the totals below catch every infeasible request on an empty
  // device (memory non-overlap implies the compute bound); overlaps need existing instances.
  const Case cases[] = {
      {{"4g.20gb", "2g.10gb", "2g.10gb"},
       "wants 8 compute slices, A100-40GB has 7",
       StatusCode::kResourceExhausted},
      {{"7g.40gb", "1g.5gb"},
       "wants 9 memory slices, A100-40GB has 8",
       StatusCode::kResourceExhausted},
      {{"3g.20gb", "3g.20gb", "3g.20gb"},
       "wants 3 x 3g.20gb, at most 2 per GPU on A100-40GB",
       StatusCode::kResourceExhausted},
      {{"3g.20gb", "5g.25gb"},
       "unknown profile '5g.25gb' for A100-40GB; profiles: 1g.5gb, "
       "1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb",
       StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    Result<MigPlan> plan = Plan(a100, c.wanted);
    ASSERT_FALSE(plan.ok()) << ::testing::PrintToString(c.wanted);
    EXPECT_EQ(plan.status().code(), c.code);
    EXPECT_THAT(plan.status().message(), HasSubstr(c.message));
  }
  // The minimal subset leaves out wants that are not part of the conflict.
  Result<MigPlan> extra = Plan(a100, {"1g.5gb", "4g.20gb"}, Layout{{{"1g.5gb", 2}}});
  ASSERT_FALSE(extra.ok());
  EXPECT_EQ(extra.status().message(),
            "no legal layout on A100-40GB: 4g.20gb (starts none free) cannot be placed: "
            "memory slices are taken by existing 1g.5gb@2");
  Result<MigPlan> with_existing =
      Plan(a100, {"1g.5gb", "2g.10gb", "3g.20gb"}, Layout{{{"1g.5gb", 4}}});
  ASSERT_FALSE(with_existing.ok());
  EXPECT_EQ(with_existing.status().message(),
            "no legal layout on A100-40GB: 3g.20gb (starts {0}) and 2g.10gb (starts {0,2}) "
            "overlap in memory slices beside existing 1g.5gb@4");
}

// ---- CheapestEviction ----

TEST(MigEvictionTest, PicksTheCheapestSet) {
  const GpuModel& a100 = Gpu("A100-40GB");
  std::vector<CostedInstance> current = {
      {{"1g.5gb", 0}, 1}, {{"1g.5gb", 1}, 1}, {{"2g.10gb", 4}, 5}};
  Result<Eviction> e = CheapestEviction(a100, current, "3g.20gb");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->cost, 2);
  EXPECT_THAT(e->evict, ElementsAre(Instance{"1g.5gb", 0}, Instance{"1g.5gb", 1}));
  EXPECT_EQ(e->placed, (Instance{"3g.20gb", 0}));

  current[0].cost = 3;
  current[1].cost = 3;
  e = CheapestEviction(a100, current, "3g.20gb");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->cost, 5);
  EXPECT_THAT(e->evict, ElementsAre(Instance{"2g.10gb", 4}));
  EXPECT_EQ(e->placed, (Instance{"3g.20gb", 4}));
}

TEST(MigEvictionTest, TiesGoToFewerInstancesThenFewerSlices) {
  const GpuModel& a100 = Gpu("A100-40GB");
  // Cost 2 either way: evicting the single 2g wins over the two 1g.
  Result<Eviction> e = CheapestEviction(
      a100, {{{"1g.5gb", 0}, 1}, {{"1g.5gb", 1}, 1}, {{"2g.10gb", 4}, 2}}, "3g.20gb");
  ASSERT_TRUE(e.ok());
  EXPECT_THAT(e->evict, ElementsAre(Instance{"2g.10gb", 4}));
  // One instance either way: the 1g.10gb (2 slices) goes before the 3g (4 slices).
  e = CheapestEviction(a100, {{{"3g.20gb", 0}}, {{"1g.10gb", 4}}, {{"2g.10gb", 4}}}, "1g.5gb");
  ASSERT_FALSE(e.ok());  // 2g.10gb@4 overlaps 1g.10gb@4: an illegal current layout
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  e = CheapestEviction(a100, {{{"3g.20gb", 0}}, {{"1g.10gb", 4}}, {{"1g.10gb", 6}}}, "1g.5gb");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_THAT(e->evict, ElementsAre(Instance{"1g.10gb", 4}));
  EXPECT_EQ(e->placed, (Instance{"1g.5gb", 4}));
}

TEST(MigEvictionTest, EvictsOnlyWhenNeeded) {
  const GpuModel& h100 = Gpu("H100-80GB");
  Result<Eviction> e = CheapestEviction(h100, {{{"3g.40gb", 0}, 9}}, "4g.40gb");
  ASSERT_TRUE(e.ok());
  EXPECT_THAT(e->evict, ElementsAre(Instance{"3g.40gb", 0}));
  e = CheapestEviction(h100, {{{"3g.40gb", 0}, 9}}, "3g.40gb");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->evict.empty());
  EXPECT_EQ(e->cost, 0);
  EXPECT_EQ(e->placed, (Instance{"3g.40gb", 4}));
}

TEST(MigEvictionTest, RejectsBadInput) {
  const GpuModel& h100 = Gpu("H100-80GB");
  EXPECT_EQ(CheapestEviction(h100, {}, "9g.1gb").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheapestEviction(h100, {{{"1g.10gb", 0}, -1}}, "7g.80gb").status().code(),
            StatusCode::kInvalidArgument);
  // The +me cap: a second +me needs the first one gone.
  Result<Eviction> e =
      CheapestEviction(h100, {{{"1g.10gb+me", 0}, 4}, {{"1g.10gb", 1}, 1}}, "1g.10gb+me");
  ASSERT_TRUE(e.ok());
  EXPECT_THAT(e->evict, ElementsAre(Instance{"1g.10gb+me", 0}));
}

TEST(MigSliceMapTest, DrawsInstancesAndFreeSlices) {
  const GpuModel& a100 = Gpu("A100-40GB");
  Layout l{{{"3g.20gb", 0}, {"2g.10gb", 4}, {"1g.5gb", 6}}};
  EXPECT_EQ(SliceMap(a100, l), "[3g.20gb           ][2g.10gb ][1g ].....");
  EXPECT_EQ(SliceMap(a100, {}), std::string(40, '.'));
}

}  // namespace
}  // namespace tessera::partition

namespace tessera::partition {
namespace {

TEST(MigInstanceName, ParseIsTheInverseOfToString) {
  auto in = Instance::Parse("3g.40gb@4");
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(*in, (Instance{"3g.40gb", 4}));
  EXPECT_EQ(in->ToString(), "3g.40gb@4");
  for (const char* bad : {"3g.40gb", "@4", "3g.40gb@", "3g.40gb@x", "3g.40gb@99999"}) {
    auto r = Instance::Parse(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace tessera::partition
