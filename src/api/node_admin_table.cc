#include "api/node_admin_table.h"

#include <nlohmann/json.hpp>

namespace tessera::api {
namespace {

using State = NodeAdminTable::State;

const char* NameOf(State s) {
  static const char* kNames[] = {"active", "cordoned", "draining"};
  return kNames[static_cast<int>(s)];
}

Result<State> Parse(const std::string& s) {
  for (State a : {State::kActive, State::kCordoned, State::kDraining}) {
    if (s == NameOf(a)) return a;
  }
  return Status::InvalidArgument("unknown node state '" + s + "'");
}

}  // namespace

State NodeAdminTable::Of(const std::string& node, int device) const {
  auto it = by_node_.find(node);
  if (it == by_node_.end()) return State::kActive;
  if (device >= 0) {
    auto d = it->second.devices.find(device);
    if (d != it->second.devices.end()) return d->second;
  }
  return it->second.node;
}

std::string NodeAdminTable::StateName(const std::string& node, int device, bool holds) const {
  const State a = Of(node, device);
  if (a == State::kDraining && !holds) return "drained";
  return NameOf(a);
}

Status NodeAdminTable::Load(const std::vector<std::pair<std::string, std::string>>& settings) {
  using Json = nlohmann::json;
  std::map<std::string, Entry> loaded;
  const size_t prefix = std::string(kSettingPrefix).size();
  for (const auto& [key, value] : settings) {
    const Status corrupt = Status::Internal("stored node state '" + key + "' is corrupt");
    Json j = Json::parse(value, nullptr, false);
    if (!j.is_object() || !j.value("state", Json()).is_string()) return corrupt;
    Result<State> state = Parse(j["state"].get<std::string>());
    if (!state.ok()) return corrupt;
    Entry a;
    a.node = *state;
    const Json devices = j.value("devices", Json::object());
    if (!devices.is_object()) return corrupt;
    for (const auto& [index, s] : devices.items()) {
      if (!s.is_string() || index.empty() || index.size() > 4 ||
          index.find_first_not_of("0123456789") != std::string::npos)
        return corrupt;
      Result<State> ds = Parse(s.get<std::string>());
      if (!ds.ok()) return corrupt;
      a.devices[std::stoi(index)] = *ds;
    }
    if (a.node != State::kActive || !a.devices.empty()) loaded[key.substr(prefix)] = a;
  }
  by_node_ = std::move(loaded);
  return Status::Ok();
}

NodeAdminTable::Change NodeAdminTable::Plan(const std::string& node, int device, State to) const {
  Change c;
  c.node = node;
  if (auto it = by_node_.find(node); it != by_node_.end()) {
    c.state = it->second.node;
    c.devices = it->second.devices;
  }
  if (device < 0) {
    c.state = to;
    c.devices.clear();  // the whole node: every device follows it again
  } else if (to == c.state) {
    c.devices.erase(device);
  } else {
    c.devices[device] = to;
  }
  nlohmann::json saved = {{"state", NameOf(c.state)}, {"devices", nlohmann::json::object()}};
  for (const auto& [d, a] : c.devices) saved["devices"][std::to_string(d)] = NameOf(a);
  c.key = kSettingPrefix + node;
  c.value = saved.dump();
  return c;
}

bool NodeAdminTable::Changes(const Change& c) const {
  const auto it = by_node_.find(c.node);
  if (it == by_node_.end()) return c.state != State::kActive || !c.devices.empty();
  return it->second.node != c.state || it->second.devices != c.devices;
}

void NodeAdminTable::Apply(const Change& c) {
  if (c.state == State::kActive && c.devices.empty()) {
    by_node_.erase(c.node);
  } else {
    by_node_[c.node] = Entry{c.state, c.devices};
  }
}

}  // namespace tessera::api
