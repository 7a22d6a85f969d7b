// NodeAdminTable (api/node_admin_table.h): a device's own state over its node's, the setting it
// is stored as read back the same, and a corrupt setting refused by name with nothing changed.
#include "api/node_admin_table.h"

#include <gtest/gtest.h>

namespace tessera::api {
namespace {

using State = NodeAdminTable::State;

TEST(NodeAdminTable, ADeviceOverridesItsNodeAndTheWholeNodeResetsItsDevices) {
  NodeAdminTable t;
  EXPECT_EQ(t.Of("n1", 0), State::kActive);  // never set: active
  t.Apply(t.Plan("n1", 2, State::kDraining));
  EXPECT_EQ(t.Of("n1", 2), State::kDraining);
  EXPECT_EQ(t.Of("n1", 1), State::kActive);
  EXPECT_EQ(t.StateName("n1", 2, /*holds=*/true), "draining");
  EXPECT_EQ(t.StateName("n1", 2, /*holds=*/false), "drained");
  t.Apply(t.Plan("n1", -1, State::kCordoned));
  EXPECT_EQ(t.Of("n1", 2), State::kCordoned);  // the whole node: its devices follow it again
  EXPECT_EQ(t.StateName("n1", -1, false), "cordoned");
  t.Apply(t.Plan("n1", 0, State::kCordoned));  // the node's own state: no device entry
  t.Apply(t.Plan("n1", -1, State::kActive));
  EXPECT_EQ(t.Of("n1", 0), State::kActive);
}

TEST(NodeAdminTable, WhatIsStoredLoadsBackTheSame) {
  NodeAdminTable t;
  const auto a = t.Plan("n1", 3, State::kCordoned);
  t.Apply(a);
  const auto b = t.Plan("n2", -1, State::kDraining);
  t.Apply(b);
  EXPECT_EQ(a.key, "node.admin/n1");
  NodeAdminTable loaded;
  ASSERT_TRUE(loaded.Load({{a.key, a.value}, {b.key, b.value}}).ok());
  EXPECT_EQ(loaded.Of("n1", 3), State::kCordoned);
  EXPECT_EQ(loaded.Of("n1", 0), State::kActive);
  EXPECT_EQ(loaded.Of("n2", 5), State::kDraining);
}

TEST(NodeAdminTable, ACorruptSettingIsNamedAndChangesNothing) {
  NodeAdminTable t;
  t.Apply(t.Plan("n1", -1, State::kCordoned));
  for (const std::string& bad : {std::string("not json"), std::string(R"({"state":"asleep"})"),
                                 std::string(R"({"state":"active","devices":{"x":"cordoned"}})"),
                                 std::string(R"({"state":"active","devices":{"1":"gone"}})")}) {
    Status st = t.Load({{"node.admin/n9", bad}});
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("'node.admin/n9' is corrupt"), std::string::npos) << st.message();
    EXPECT_EQ(t.Of("n1", 0), State::kCordoned) << bad;
  }
}

}  // namespace
}  // namespace tessera::api
