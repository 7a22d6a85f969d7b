#include "api/config.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>

#include "backends/backend.h"
#include "model/quantity.h"
#include "partition/catalog.h"

namespace tessera::api {
namespace {

Status Bad(const std::string& where, const std::string& what) {
  return Status::InvalidArgument("config: " + where + ": " + what);
}

Result<std::string> Str(const YAML::Node& n, const std::string& where) {
  if (!n || !n.IsScalar()) return Bad(where, "expected a string");
  return n.as<std::string>();
}

Result<int64_t> Int(const YAML::Node& n, const std::string& where) {
  if (!n || !n.IsScalar()) return Bad(where, "expected an integer");
  auto v = ParseNonNegativeInt(n.as<std::string>());
  if (!v.ok()) return Bad(where, v.status().message());
  return v;
}

Result<int64_t> Duration(const YAML::Node& n, const std::string& where) {
  if (!n || !n.IsScalar()) return Bad(where, "expected a duration such as 10s or 500ms");
  std::string s = n.as<std::string>();
  int64_t mult = 1000;
  std::string num = s;
  if (s.size() > 2 && s.substr(s.size() - 2) == "ms") {
    mult = 1;
    num = s.substr(0, s.size() - 2);
  } else if (!s.empty() && (s.back() == 's' || s.back() == 'm' || s.back() == 'h')) {
    mult = s.back() == 's' ? 1000 : s.back() == 'm' ? 60000 : 3600000;
    num = s.substr(0, s.size() - 1);
  }
  auto v = ParseNonNegativeInt(num);
  if (!v.ok()) return Bad(where, "'" + s + "' is not a duration such as 10s, 500ms, 2m, 1h");
  return *v * mult;
}

Result<std::vector<std::string>> StrList(const YAML::Node& n, const std::string& where) {
  std::vector<std::string> out;
  if (!n) return out;
  if (!n.IsSequence()) return Bad(where, "expected a list");
  for (size_t i = 0; i < n.size(); ++i) {
    auto s = Str(n[i], where + "[" + std::to_string(i) + "]");
    if (!s.ok()) return s.status();
    out.push_back(*s);
  }
  return out;
}

Result<AllocationForm> FormOf(const std::string& s, const std::string& where) {
  if (s == "whole") return AllocationForm::kWhole;
  if (s == "partition") return AllocationForm::kPartition;
  if (s == "share") return AllocationForm::kShare;
  return Bad(where, "unknown form '" + s + "' (whole, partition, share)");
}

Result<std::vector<AllocationForm>> Forms(const YAML::Node& n, const std::string& where) {
  auto names = StrList(n, where);
  if (!names.ok()) return names.status();
  std::vector<AllocationForm> out;
  for (size_t i = 0; i < names->size(); ++i) {
    auto f = FormOf((*names)[i], where + "[" + std::to_string(i) + "]");
    if (!f.ok()) return f.status();
    out.push_back(*f);
  }
  return out;
}

// {gpu: 2, gpu_memory: 80GiB, cpu: 16, memory: 64GiB}
Result<Resources> Res(const YAML::Node& n, const std::string& where) {
  Resources r;
  if (!n) return r;
  if (!n.IsMap()) return Bad(where, "expected a map of gpu, gpu_memory, cpu, memory");
  for (const auto& kv : n) {
    std::string key = kv.first.as<std::string>();
    std::string val = kv.second.IsScalar() ? kv.second.as<std::string>() : "";
    std::string w = where + "." + key;
    if (key == "gpu" || key == "cpu") {
      auto v = ParseMilli(val);
      if (!v.ok()) return Bad(w, v.status().message());
      (key == "gpu" ? r.gpu_milli : r.cpu_milli) = *v;
    } else if (key == "gpu_memory" || key == "memory") {
      auto v = ParseMemoryMiB(val);
      if (!v.ok()) return Bad(w, v.status().message());
      (key == "gpu_memory" ? r.gpu_memory_mib : r.memory_mib) = *v;
    } else {
      return Bad(w, "unknown resource (gpu, gpu_memory, cpu, memory)");
    }
  }
  return r;
}

template <typename T>
Status CheckUnique(const std::vector<T>& items, const std::string& what) {
  std::set<std::string> seen;
  for (const T& t : items) {
    if (t.name.empty()) return Bad(what, "an entry has no name");
    if (!seen.insert(t.name).second) return Bad(what, "duplicate name '" + t.name + "'");
  }
  return Status::Ok();
}

Status CheckKeys(const YAML::Node& n, const std::string& where, const std::set<std::string>& known) {
  for (const auto& kv : n) {
    std::string k = kv.first.as<std::string>();
    if (!known.count(k)) return Bad(where + "." + k, "unknown field");
  }
  return Status::Ok();
}

}  // namespace

const char* RoleName(Role r) {
  switch (r) {
    case Role::kAdmin: return "admin";
    case Role::kUser: return "user";
    case Role::kAgent: return "agent";
  }
  return "?";
}

std::string Sha256Hex(const std::string& text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::string NewToken() {
  unsigned char buf[20];
  RAND_bytes(buf, sizeof buf);
  static const char* kHex = "0123456789abcdef";
  std::string out = "tsk_";
  for (unsigned char c : buf) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

const Identity* EngineConfig::FindIdentityByTokenHash(const std::string& hash) const {
  for (const Identity& i : identities) {
    if (i.token_sha256 == hash) return &i;
  }
  return nullptr;
}
const GroupConfig* EngineConfig::FindGroup(const std::string& name) const {
  for (const auto& g : groups) {
    if (g.name == name) return &g;
  }
  return nullptr;
}
const QueueConfig* EngineConfig::FindQueue(const std::string& name) const {
  for (const auto& q : queues) {
    if (q.name == name) return &q;
  }
  return nullptr;
}
const ProfileConfig* EngineConfig::FindProfile(const std::string& name) const {
  for (const auto& p : profiles) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Result<EngineConfig> ParseConfig(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("config: not valid YAML: " + std::string(e.what()));
  }
  if (!root.IsMap()) return Status::InvalidArgument("config: expected a YAML map at the top");
  try {
    Status st = CheckKeys(root, "config", {"cluster", "heartbeat_timeout", "cancel_grace", "backend_poll", "backend_nice", "utilization_sample", "identities",
                                           "groups", "pools", "profiles", "queues"});
    if (!st.ok()) return st;
    EngineConfig c;
    if (root["cluster"]) {
      auto s = Str(root["cluster"], "cluster");
      if (!s.ok()) return s.status();
      c.cluster = *s;
    }
    if (root["heartbeat_timeout"]) {
      auto d = Duration(root["heartbeat_timeout"], "heartbeat_timeout");
      if (!d.ok()) return d.status();
      c.heartbeat_timeout_ms = *d;
    }
    if (root["cancel_grace"]) {
      auto d = Duration(root["cancel_grace"], "cancel_grace");
      if (!d.ok()) return d.status();
      c.cancel_grace_ms = *d;
    }
    if (root["backend_poll"]) {
      auto d = Duration(root["backend_poll"], "backend_poll");
      if (!d.ok()) return d.status();
      if (*d <= 0) return Bad("backend_poll", "must be positive");
      c.backend_poll_ms = *d;
    }
    if (root["utilization_sample"]) {
      auto d = Duration(root["utilization_sample"], "utilization_sample");
      if (!d.ok()) return d.status();
      if (*d <= 0) return Bad("utilization_sample", "must be positive");
      c.utilization_sample_ms = *d;
    }
    if (root["backend_nice"]) {
      int n = -1;
      if (!YAML::convert<int>::decode(root["backend_nice"], n) || n < 0 || n > 19) {
        return Bad("backend_nice", "must be an integer from 0 to 19");
      }
      c.backend_nice = n;
    }
    const YAML::Node ids = root["identities"];
    if (!ids || !ids.IsSequence() || ids.size() == 0) {
      return Bad("identities", "at least one identity is needed");
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      std::string w = "identities[" + std::to_string(i) + "]";
      const YAML::Node n = ids[i];
      st = CheckKeys(n, w, {"name", "role", "groups", "token", "token_sha256"});
      if (!st.ok()) return st;
      Identity id;
      auto name = Str(n["name"], w + ".name");
      if (!name.ok()) return name.status();
      id.name = *name;
      std::string role = n["role"] ? n["role"].as<std::string>() : "user";
      if (role == "admin") {
        id.role = Role::kAdmin;
      } else if (role == "user") {
        id.role = Role::kUser;
      } else if (role == "agent") {
        id.role = Role::kAgent;
      } else {
        return Bad(w + ".role", "unknown role '" + role + "' (admin, user, agent)");
      }
      auto groups = StrList(n["groups"], w + ".groups");
      if (!groups.ok()) return groups.status();
      id.groups = *groups;
      if (n["token_sha256"]) {
        id.token_sha256 = n["token_sha256"].as<std::string>();
        if (id.token_sha256.size() != 64) return Bad(w + ".token_sha256", "expected 64 hex digits");
      } else if (n["token"]) {
        std::string t = n["token"].as<std::string>();
        if (t.size() < 8) return Bad(w + ".token", "too short (at least 8 characters)");
        id.token_sha256 = Sha256Hex(t);
      } else {
        return Bad(w, "needs token or token_sha256");
      }
      c.identities.push_back(id);
    }
    st = CheckUnique(c.identities, "identities");
    if (!st.ok()) return st;
    for (const auto& a : c.identities) {
      for (const auto& b : c.identities) {
        if (&a != &b && a.token_sha256 == b.token_sha256) {
          return Bad("identities", "'" + a.name + "' and '" + b.name + "' share a token");
        }
      }
    }
    const YAML::Node groups = root["groups"];
    if (groups) {
      if (!groups.IsSequence()) return Bad("groups", "expected a list");
      for (size_t i = 0; i < groups.size(); ++i) {
        std::string w = "groups[" + std::to_string(i) + "]";
        st = CheckKeys(groups[i], w, {"name", "reservation", "limit", "weight"});
        if (!st.ok()) return st;
        GroupConfig g;
        auto name = Str(groups[i]["name"], w + ".name");
        if (!name.ok()) return name.status();
        g.name = *name;
        auto res = Res(groups[i]["reservation"], w + ".reservation");
        if (!res.ok()) return res.status();
        g.reservation = *res;
        auto lim = Res(groups[i]["limit"], w + ".limit");
        if (!lim.ok()) return lim.status();
        g.limit = *lim;
        if (groups[i]["weight"]) {
          auto wt = Int(groups[i]["weight"], w + ".weight");
          if (!wt.ok()) return wt.status();
          if (*wt == 0) return Bad(w + ".weight", "must be at least 1");
          g.weight = *wt;
        }
        auto check = [&](int64_t r, int64_t l, const char* what) -> Status {
          if (l != 0 && r > l) return Bad(w + ".reservation." + what, "above the limit");
          return Status::Ok();
        };
        for (Status s : {check(g.reservation.gpu_milli, g.limit.gpu_milli, "gpu"),
                         check(g.reservation.gpu_memory_mib, g.limit.gpu_memory_mib, "gpu_memory"),
                         check(g.reservation.cpu_milli, g.limit.cpu_milli, "cpu"),
                         check(g.reservation.memory_mib, g.limit.memory_mib, "memory")}) {
          if (!s.ok()) return s;
        }
        c.groups.push_back(g);
      }
    }
    st = CheckUnique(c.groups, "groups");
    if (!st.ok()) return st;
    for (size_t i = 0; i < c.identities.size(); ++i) {
      for (const auto& g : c.identities[i].groups) {
        if (!c.FindGroup(g)) {
          return Bad("identities[" + std::to_string(i) + "].groups", "unknown group '" + g + "'");
        }
      }
    }
    const YAML::Node pools = root["pools"];
    if (pools) {
      if (!pools.IsSequence()) return Bad("pools", "expected a list");
      for (size_t i = 0; i < pools.size(); ++i) {
        std::string w = "pools[" + std::to_string(i) + "]";
        st = CheckKeys(pools[i], w, {"name", "forms"});
        if (!st.ok()) return st;
        PoolConfig p;
        auto name = Str(pools[i]["name"], w + ".name");
        if (!name.ok()) return name.status();
        p.name = *name;
        auto forms = Forms(pools[i]["forms"], w + ".forms");
        if (!forms.ok()) return forms.status();
        p.forms = forms->empty() ? std::vector<AllocationForm>{AllocationForm::kWhole, AllocationForm::kShare}
                                 : *forms;
        c.pools.push_back(p);
      }
    }
    if (c.pools.empty()) {
      c.pools.push_back({"default", {AllocationForm::kWhole, AllocationForm::kPartition, AllocationForm::kShare}});
    }
    st = CheckUnique(c.pools, "pools");
    if (!st.ok()) return st;
    const YAML::Node profiles = root["profiles"];
    if (!profiles || !profiles.IsSequence()) return Bad("profiles", "expected a list of profiles");
    for (size_t i = 0; i < profiles.size(); ++i) {
      std::string w = "profiles[" + std::to_string(i) + "]";
      const YAML::Node n = profiles[i];
      st = CheckKeys(n, w, {"name", "gpus", "gpu_memory", "gpu_fraction", "cpu", "memory", "max_gpus",
                            "max_gpu_memory", "forms", "pools"});
      if (!st.ok()) return st;
      ProfileConfig p;
      auto name = Str(n["name"], w + ".name");
      if (!name.ok()) return name.status();
      p.name = *name;
      if (n["gpus"]) {
        auto v = Int(n["gpus"], w + ".gpus");
        if (!v.ok()) return v.status();
        p.gpus = static_cast<int>(*v);
      }
      if (n["max_gpus"]) {
        auto v = Int(n["max_gpus"], w + ".max_gpus");
        if (!v.ok()) return v.status();
        p.max_gpus = static_cast<int>(*v);
      }
      for (auto [key, field] : {std::pair<const char*, MiB*>{"gpu_memory", &p.gpu_memory_mib},
                                {"memory", &p.memory_mib},
                                {"max_gpu_memory", &p.max_gpu_memory_mib}}) {
        if (!n[key]) continue;
        auto v = ParseMemoryMiB(n[key].as<std::string>());
        if (!v.ok()) return Bad(w + "." + key, v.status().message());
        *field = *v;
      }
      for (auto [key, field] : {std::pair<const char*, int64_t*>{"cpu", &p.cpu_milli},
                                {"gpu_fraction", &p.gpu_milli}}) {
        if (!n[key]) continue;
        auto v = ParseMilli(n[key].as<std::string>());
        if (!v.ok()) return Bad(w + "." + key, v.status().message());
        *field = *v;
      }
      auto forms = Forms(n["forms"], w + ".forms");
      if (!forms.ok()) return forms.status();
      p.forms = *forms;
      if (p.forms.empty()) return Bad(w + ".forms", "at least one form (whole, partition, share)");
      auto pl = StrList(n["pools"], w + ".pools");
      if (!pl.ok()) return pl.status();
      p.pools = *pl;
      for (const auto& name2 : p.pools) {
        bool found = false;
        for (const auto& pool : c.pools) found = found || pool.name == name2;
        if (!found) return Bad(w + ".pools", "unknown pool '" + name2 + "'");
      }
      if (p.max_gpus == 0) p.max_gpus = p.gpus;
      if (p.max_gpu_memory_mib == 0) p.max_gpu_memory_mib = p.gpu_memory_mib;
      if (p.max_gpus < p.gpus) return Bad(w + ".max_gpus", "below gpus");
      bool share = false;
      for (auto f : p.forms) share = share || f == AllocationForm::kShare;
      if (share && p.gpu_memory_mib == 0) return Bad(w + ".gpu_memory", "a share needs a memory cap");
      c.profiles.push_back(p);
    }
    st = CheckUnique(c.profiles, "profiles");
    if (!st.ok()) return st;
    const YAML::Node queues = root["queues"];
    if (!queues || !queues.IsSequence() || queues.size() == 0) return Bad("queues", "at least one queue");
    for (size_t i = 0; i < queues.size(); ++i) {
      std::string w = "queues[" + std::to_string(i) + "]";
      const YAML::Node n = queues[i];
      st = CheckKeys(n, w, {"name", "profile", "groups", "priority", "preemptible", "class",
                            "requeue_on_loss", "backend", "partition", "template", "gpu_type",
                            "gres_whole", "gres_share", "gres_partition", "shard_memory", "cap_library",
                            "mig_model"});
      if (!st.ok()) return st;
      QueueConfig q;
      auto name = Str(n["name"], w + ".name");
      if (!name.ok()) return name.status();
      q.name = *name;
      auto prof = Str(n["profile"], w + ".profile");
      if (!prof.ok()) return prof.status();
      q.profile = *prof;
      if (!c.FindProfile(q.profile)) return Bad(w + ".profile", "unknown profile '" + q.profile + "'");
      auto gs = StrList(n["groups"], w + ".groups");
      if (!gs.ok()) return gs.status();
      q.groups = *gs;
      for (const auto& g : q.groups) {
        if (!c.FindGroup(g)) return Bad(w + ".groups", "unknown group '" + g + "'");
      }
      if (n["priority"]) {
        auto v = Int(n["priority"], w + ".priority");
        if (!v.ok()) return v.status();
        q.priority = static_cast<int>(*v);
      }
      if (n["preemptible"]) q.preemptible = n["preemptible"].as<bool>();
      if (n["requeue_on_loss"]) q.requeue_on_loss = n["requeue_on_loss"].as<bool>();
      if (n["class"]) {
        q.default_class = n["class"].as<std::string>();
        static const std::set<std::string> kClasses = {"training", "inference", "interactive", "ci",
                                                       "batch"};
        if (!kClasses.count(q.default_class)) {
          return Bad(w + ".class", "unknown class '" + q.default_class +
                                       "' (training, inference, interactive, ci, batch)");
        }
      }
      if (n["backend"]) {
        q.backend = n["backend"].as<std::string>();
        const auto& reg = backends::BuiltinRegistry();
        if (q.backend != "local" && !reg.Has(q.backend)) {
          std::string names = "local";
          for (const auto& b : reg.Names()) names += ", " + b;
          return Bad(w + ".backend", "unknown backend '" + q.backend + "' (" + names + ")");
        }
      }
      for (auto [key, field] : std::initializer_list<std::pair<const char*, std::string*>>{
               {"partition", &q.partition}, {"template", &q.template_path}, {"gpu_type", &q.gpu_type},
               {"gres_whole", &q.gres_whole}, {"gres_share", &q.gres_share}, {"gres_partition", &q.gres_partition},
               {"cap_library", &q.cap_library}, {"mig_model", &q.mig_model}}) {
        if (!n[key]) continue;
        if (q.backend == "local") return Bad(w + "." + key, "only for a queue with an external backend (slurm, pbs)");
        auto v = Str(n[key], w + "." + key);
        if (!v.ok()) return v.status();
        *field = *v;
      }
      if (n["shard_memory"]) {
        if (!n["shard_memory"].IsScalar()) return Bad(w + ".shard_memory", "expected a size such as 1GiB");
        auto v = ParseMemoryMiB(n["shard_memory"].as<std::string>());
        if (!v.ok() || *v <= 0) return Bad(w + ".shard_memory", "expected a positive size such as 1GiB");
        q.shard_mib = *v;
      }
      if (q.backend == "pbs" && (!q.mig_model.empty() || !q.gres_partition.empty())) {
        return Bad(w + (q.mig_model.empty() ? ".gres_partition" : ".mig_model"), "the PBS backend maps no MIG instances");
      }
      if (!q.mig_model.empty()) {
        const partition::GpuModel* m = partition::Catalog::BuiltIn().Find(q.mig_model);
        if (m == nullptr || !m->is_mig()) {
          std::string mig;
          for (const auto& g : partition::Catalog::BuiltIn().models()) {
            if (g.is_mig()) mig += (mig.empty() ? "" : ", ") + g.name;
          }
          return Bad(w + ".mig_model", "'" + q.mig_model + "' is not a MIG model (" + mig + ")");
        }
        q.mig_model = m->name;
      }
      if (!q.template_path.empty()) {
        std::ifstream t(q.template_path);
        if (!t) return Bad(w + ".template", "cannot read '" + q.template_path + "'");
      }
      c.queues.push_back(q);
    }
    st = CheckUnique(c.queues, "queues");
    if (!st.ok()) return st;
    return c;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("config: " + std::string(e.what()));
  }
}

Result<EngineConfig> LoadConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read config '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConfig(ss.str());
}

}  // namespace tessera::api
