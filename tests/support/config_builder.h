// The server config YAML (the file `tessera serve --config` reads; api::ParseConfig) a test
// needs, with defaults, so a test says only what matters to it:
//
//   ConfigBuilder().Cycle("300ms").Queue("batch", "train", {"research"}, "backend: slurm").Yaml()
//
// Defaults (what the fixtures' helpers assume):
//   identities  admin (admin-token-1), alice (user in research, alice-token-1), agent
//               (agent-token-1), always; declaring one of those names again replaces it,
//               WithoutIdentity drops it
//   groups      research, when none is declared
//   profiles    train: 1 whole card, cpu 100m, memory 64MiB, when none is declared
//   queues      training: profile train, group research, when none is declared
// Top-level settings (heartbeat_timeout, cycle, grace, backend sections) only when set. Entries
// come out in the order declared, one flow mapping a line ("- {name: ..., role: ...}"), the form
// WithJobAccounts (tests/api/proc.h) rewrites.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tessera::testing {

class ConfigBuilder {
 public:
  ConfigBuilder() {
    Admin();
    User("alice", {"research"});
    Agent();
  }

  // Any top-level `key: value` (set again: replaced).
  ConfigBuilder& Set(const std::string& key, const std::string& value) {
    Put(settings_, key, key + ": " + value);
    return *this;
  }
  ConfigBuilder& HeartbeatTimeout(const std::string& d) { return Set("heartbeat_timeout", d); }
  ConfigBuilder& Cycle(const std::string& d) { return Set("cycle", d); }
  ConfigBuilder& Grace(const std::string& d) { return Set("grace", d); }
  // A batch backend's section: Backend("kubernetes", "kubeconfig: /x, namespace: ml").
  ConfigBuilder& Backend(const std::string& name, const std::string& settings) {
    return Set(name, "{" + settings + "}");
  }

  // An identity; `extra` is more of its fields ("run_as: bob, nodes: [r1-*]").
  ConfigBuilder& Identity(const std::string& name, const std::string& role,
                          const std::string& token, const std::string& extra = "") {
    std::string line = "{name: " + name + ", role: " + role;
    if (!extra.empty()) line += ", " + extra;
    line += ", token: " + token + "}";
    Put(identities_, name, line);
    return *this;
  }
  ConfigBuilder& Admin(const std::string& name = "admin", const std::string& token = "") {
    return Identity(name, "admin", Token(name, token));
  }
  // A user in `groups`; token NAME-token-1 unless given.
  ConfigBuilder& User(const std::string& name, const std::vector<std::string>& groups,
                      const std::string& token = "", const std::string& extra = "") {
    std::string fields = "groups: " + List(groups);
    if (!extra.empty()) fields += ", " + extra;
    return Identity(name, "user", Token(name, token), fields);
  }
  // An agent; with `nodes`, allowed to speak only for those (patterns such as r1-*).
  ConfigBuilder& Agent(const std::string& name = "agent", const std::string& token = "",
                       const std::vector<std::string>& nodes = {}) {
    return Identity(name, "agent", Token(name, token),
                    nodes.empty() ? "" : "nodes: " + List(nodes));
  }

  // Drops a declared identity (a default one too: a config without alice).
  ConfigBuilder& WithoutIdentity(const std::string& name) {
    std::erase_if(identities_, [&](const auto& e) { return e.first == name; });
    return *this;
  }

  // A group; `reservation` and `limit` are resource maps' insides ("gpu: 1").
  ConfigBuilder& Group(const std::string& name, const std::string& reservation = "",
                       const std::string& limit = "", const std::string& extra = "") {
    std::string line = "{name: " + name;
    if (!reservation.empty()) line += ", reservation: {" + reservation + "}";
    if (!limit.empty()) line += ", limit: {" + limit + "}";
    if (!extra.empty()) line += ", " + extra;
    Put(groups_, name, line + "}");
    return *this;
  }
  // A profile: its fields after the name.
  ConfigBuilder& Profile(const std::string& name, const std::string& fields =
                                                      "gpus: 1, cpu: 100m, memory: 64MiB, "
                                                      "forms: [whole]") {
    Put(profiles_, name, "{name: " + name + ", " + fields + "}");
    return *this;
  }
  // A queue of `profile` for `groups`; `extra` is more of its fields ("class: training").
  ConfigBuilder& Queue(const std::string& name, const std::string& profile,
                       const std::vector<std::string>& groups, const std::string& extra = "") {
    std::string line = "{name: " + name + ", profile: " + profile + ", groups: " + List(groups);
    if (!extra.empty()) line += ", " + extra;
    Put(queues_, name, line + "}");
    return *this;
  }
  // YAML appended as is, for what the builder does not know.
  ConfigBuilder& Raw(const std::string& yaml) {
    raw_ += yaml;
    if (!raw_.empty() && raw_.back() != '\n') raw_ += '\n';
    return *this;
  }

  std::string Yaml() const {
    std::string out;
    for (const auto& [key, line] : settings_) out += line + "\n";
    Section(out, "identities", identities_, {});
    Section(out, "groups", groups_, {{"research", "{name: research}"}});
    Section(out, "profiles", profiles_,
            {{"train", "{name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}"}});
    Section(out, "queues", queues_,
            {{"training", "{name: training, profile: train, groups: [research]}"}});
    return out + raw_;
  }

 private:
  using Entries = std::vector<std::pair<std::string, std::string>>;  // name, line

  static void Put(Entries& entries, const std::string& name, const std::string& line) {
    for (auto& [n, l] : entries) {
      if (n == name) {
        l = line;
        return;
      }
    }
    entries.emplace_back(name, line);
  }
  static void Section(std::string& out, const std::string& title, const Entries& entries,
                      const Entries& defaults) {
    const Entries& e = entries.empty() ? defaults : entries;
    if (e.empty()) return;
    out += title + ":\n";
    for (const auto& [name, line] : e) out += "  - " + line + "\n";
  }
  static std::string List(const std::vector<std::string>& items) {
    std::string s = "[";
    for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
    return s + "]";
  }
  static std::string Token(const std::string& name, const std::string& token) {
    return token.empty() ? name + "-token-1" : token;
  }

  Entries settings_, identities_, groups_, profiles_, queues_;
  std::string raw_;
};

}  // namespace tessera::testing
