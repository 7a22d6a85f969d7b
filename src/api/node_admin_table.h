// NodeAdminTable: which nodes and devices an administrator cordoned or drains (node_admin.cc has
// the requests). A node's own state covers its devices; a device's own state overrides the
// node's for that device. Stored as one setting per node (kSettingPrefix + node: JSON
// {"state", "devices": {index: state}}); the table reads and writes that text but never the
// store. Not thread-safe: the engine calls it under its mutex.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tessera::api {

class NodeAdminTable {
 public:
  enum class State { kActive, kCordoned, kDraining };
  static constexpr const char* kSettingPrefix = "node.admin/";

  // Device `device` of `node` (-1: the node's own state).
  State Of(const std::string& node, int device) const;
  // "active", "cordoned", "draining", or "drained" (draining, and `holds` nothing there now).
  std::string StateName(const std::string& node, int device, bool holds) const;

  // Replaces the table with the stored settings (key, value); a corrupt one is named in the
  // error, and the table is then left as it was.
  Status Load(const std::vector<std::pair<std::string, std::string>>& settings);

  // Setting `node`, or device `device` of it (-1: the whole node, whose devices then follow it
  // again), to `to`: the setting to store (key, value). Apply it once that is durable.
  struct Change {
    std::string node;
    State state = State::kActive;
    std::map<int, State> devices;
    std::string key, value;
  };
  Change Plan(const std::string& node, int device, State to) const;
  bool Changes(const Change& c) const;  // false: the table holds that already
  void Apply(const Change& c);

 private:
  struct Entry {
    State node = State::kActive;
    std::map<int, State> devices;  // a device's own state, over the node's
  };
  std::map<std::string, Entry> by_node_;  // absent: active
};

}  // namespace tessera::api
