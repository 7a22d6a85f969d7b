#include "backends/kubernetes/capacity.h"

#include <algorithm>
#include <cstdlib>

namespace tessera::backends::kube {
namespace {

// A quantity's integer value ("98", "80Gi", "4k"); -1 for anything else (fractions, bad text).
int64_t QuantityValue(const Json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  const std::string s = v.is_string() ? v.get<std::string>() : "";
  const size_t digits = std::min(s.find_first_not_of("0123456789"), s.size());
  if (digits == 0 || digits > 15) return -1;
  const int64_t n = std::stoll(s.substr(0, digits));
  const std::string suffix = s.substr(digits);
  static const std::map<std::string, int64_t> kMul = {
      {"", 1},           {"k", 1000},       {"M", 1000000},    {"G", 1000000000},
      {"Ki", 1LL << 10}, {"Mi", 1LL << 20}, {"Gi", 1LL << 30}, {"Ti", 1LL << 40}};
  auto it = kMul.find(suffix);
  if (it == kMul.end() || n > (int64_t{1} << 62) / it->second) return -1;
  return n * it->second;
}

// A device attribute's value as text: `name` in the driver's own domain, or "driver/name".
std::string Attr(const Json& device, const std::string& driver, const std::string& name) {
  const Json& attrs = At(device, "attributes");
  const Json* v = &At(attrs, name.c_str());
  if (v->is_null()) v = &At(attrs, (driver + "/" + name).c_str());
  if (v->is_null()) return "";
  if (At(*v, "string").is_string()) return At(*v, "string").get<std::string>();
  if (At(*v, "int").is_number_integer()) return std::to_string(At(*v, "int").get<int64_t>());
  return "";
}

// An extended resource's integer count in a resource map ("8"; anything else counts 0).
int64_t Count(const Json& resources, const char* name) {
  const Json& v = At(resources, name);
  if (v.is_number_integer()) return std::max<int64_t>(0, v.get<int64_t>());
  const std::string s = v.is_string() ? v.get<std::string>() : "";
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoll(s);
}

}  // namespace

DraCapacity ReadDra(const std::map<std::string, Json>& slices,
                    const std::map<std::string, Json>& claims, const std::set<std::string>& ready,
                    const std::string& cluster) {
  static const std::set<std::string> kGpuDrivers = {"gpu.nvidia.com", "gpu.amd.com"};
  DraCapacity out;
  std::set<std::string> held;  // driver/pool/device
  for (const auto& [key, c] : claims) {
    (void)key;
    if (StrAt(At(At(c, "metadata"), "labels"), "tessera.io/cluster") == cluster) continue;
    const Json& results = At(At(At(At(c, "status"), "allocation"), "devices"), "results");
    if (!results.is_array()) continue;
    for (const Json& r : results)
      held.insert(StrAt(r, "driver") + "/" + StrAt(r, "pool") + "/" + StrAt(r, "device"));
  }
  struct CounterSet {
    std::map<std::string, int64_t> total, used;
    std::string product;
  };
  struct Parent {
    int64_t slices = 0, held_slices = 0, of = 7;
    std::string product;
  };
  std::map<std::string, CounterSet> sets;  // driver/pool/name
  std::map<std::string, Parent> parents;   // driver/pool/parent
  for (const auto& [key, sl] : slices) {
    (void)key;
    const Json& spec = At(sl, "spec");
    const std::string driver = StrAt(spec, "driver");
    if (!kGpuDrivers.count(driver)) continue;
    const std::string node = StrAt(spec, "nodeName");
    if (At(spec, "allNodes") != true) {
      if (!ready.count(node)) continue;  // cordoned, not ready or unknown: no capacity
      out.nodes.insert(node);
    }
    const std::string pool = driver + "/" + StrAt(At(spec, "pool"), "name") + "/";
    const Json& shared = At(spec, "sharedCounters");
    if (shared.is_array()) {
      for (const Json& cs : shared) {
        const Json& counters = At(cs, "counters");
        if (!counters.is_object()) continue;
        CounterSet& set = sets[pool + StrAt(cs, "name")];
        for (const auto& [c, v] : counters.items()) set.total[c] = QuantityValue(At(v, "value"));
      }
    }
    const Json& devices = At(spec, "devices");
    if (!devices.is_array()) continue;
    for (const Json& d : devices) {
      const std::string name = StrAt(d, "name");
      const bool is_held = held.count(pool + name) > 0;
      const std::string type = Attr(d, driver, "type");
      const std::string profile = Attr(d, driver, "profile");
      const std::string product = Attr(d, driver, "productName");
      const bool mig = type == "mig" || !profile.empty();
      ++out.devices;
      out.mig += mig ? 1 : 0;
      out.held += is_held ? 1 : 0;
      const Json& consumes = At(d, "consumesCounters");
      if (consumes.is_array() && !consumes.empty()) {
        for (const Json& cc : consumes) {
          CounterSet& set = sets[pool + StrAt(cc, "counterSet")];
          if (!mig && !product.empty()) set.product = product;
          if (!is_held || !At(cc, "counters").is_object()) continue;
          for (const auto& [c, v] : At(cc, "counters").items())
            set.used[c] += std::max<int64_t>(0, QuantityValue(At(v, "value")));
        }
      } else if (mig) {
        std::string parent = Attr(d, driver, "parentUUID");
        Parent& p = parents[pool + (parent.empty() ? name : parent)];
        const int64_t n = std::atoll(profile.c_str());  // "3g.40gb" -> 3
        p.slices += n;
        p.held_slices += is_held ? n : 0;
        if (!product.empty()) p.product = product;
        if (product.find("A30") != std::string::npos) p.of = 4;
      } else {
        out.total_milli += 1000;
        if (!is_held) {
          out.free_milli += 1000;
          out.models[product.empty() ? "unlabelled" : product] += 1000;
        }
      }
    }
  }
  for (const auto& [key, set] : sets) {
    (void)key;
    int64_t free = -1;
    for (const auto& [c, total] : set.total) {
      if (total <= 0) continue;
      const int64_t used = std::min(total, set.used.count(c) ? set.used.at(c) : 0);
      const int64_t f = (total - used) * 1000 / total;  // counters fit in 2^62 / 1000
      free = free < 0 ? f : std::min(free, f);
    }
    if (free < 0) continue;  // a set without counters offers nothing
    out.total_milli += 1000;
    out.free_milli += free;
    out.models[set.product.empty() ? "partitionable GPU" : set.product] += free;
  }
  for (const auto& [key, p] : parents) {
    (void)key;
    const int64_t n = std::min(p.slices, p.of);
    out.total_milli += n * 1000 / p.of;
    const int64_t free = std::max<int64_t>(0, n - p.held_slices) * 1000 / p.of;
    out.free_milli += free;
    out.models[(p.product.empty() ? "GPU" : p.product) + " (MIG)"] += free;
  }
  return out;
}

std::string Cards(int64_t milli) {
  std::string s = std::to_string(milli / 1000);
  if (milli % 1000 == 0) return s;
  std::string frac = std::to_string(1000 + milli % 1000).substr(1);
  while (frac.back() == '0') frac.pop_back();
  return s + "." + frac;
}

std::set<std::string> GpuSliceNodes(const std::map<std::string, Json>& slices) {
  std::set<std::string> out;
  for (const auto& [key, sl] : slices) {
    (void)key;
    const std::string d = StrAt(At(sl, "spec"), "driver");
    if (d == "gpu.nvidia.com" || d == "gpu.amd.com") out.insert(StrAt(At(sl, "spec"), "nodeName"));
  }
  return out;
}

Capacity ReadCapacity(const std::map<std::string, Json>& nodes,
                      const std::map<std::string, Json>& pods,
                      const std::map<std::string, Json>& slices,
                      const std::map<std::string, Json>& claims, const std::string& cluster) {
  static const char* kWhole[] = {"nvidia.com/gpu", "amd.com/gpu"};
  const std::set<std::string> dra_nodes = GpuSliceNodes(slices);  // counted from the slices
  std::map<std::string, int64_t> free;                            // ready node -> cards
  std::map<std::string, int64_t> models;                          // nvidia.com/gpu.product -> cards
  int64_t total = 0, foreign = 0;
  for (const auto& [key, n] : nodes) {
    (void)key;
    if (At(At(n, "spec"), "unschedulable") == true) continue;
    bool ready = true;
    const Json& conds = At(At(n, "status"), "conditions");
    if (conds.is_array()) {
      for (const Json& cd : conds) {
        if (StrAt(cd, "type") == "Ready") ready = StrAt(cd, "status") == "True";
      }
    }
    if (!ready) continue;
    int64_t cards = 0;
    const std::string name = StrAt(At(n, "metadata"), "name");
    for (const char* r : kWhole) cards += Count(At(At(n, "status"), "allocatable"), r);
    if (dra_nodes.count(name)) cards = 0;
    free[name] = cards;
    total += cards;
    // GPU feature discovery's labels, for people: which models the capacity is made of.
    const Json& labels = At(At(n, "metadata"), "labels");
    std::string product = StrAt(labels, "nvidia.com/gpu.product");
    if (product.empty()) product = StrAt(labels, "amd.com/gpu.product-name");
    if (cards > 0) models[product.empty() ? "unlabelled" : product] += cards;
  }
  for (const auto& [key, p] : pods) {
    (void)key;
    if (StrAt(At(At(p, "metadata"), "labels"), "tessera.io/cluster") == cluster)
      continue;  // ours: in the ledger
    auto node = free.find(StrAt(At(p, "spec"), "nodeName"));
    if (node == free.end()) continue;
    const Json& containers = At(At(p, "spec"), "containers");
    if (!containers.is_array()) continue;
    for (const Json& ct : containers) {
      const Json& res = At(ct, "resources");
      for (const char* r : kWhole) {
        int64_t n = Count(At(res, "requests"), r);
        if (n == 0) n = Count(At(res, "limits"), r);
        n = std::min(n, node->second);
        node->second -= n;
        foreign += n;
      }
    }
  }
  Capacity cap;
  cap.gpu_milli = (total - foreign) * 1000;
  cap.detail = std::to_string(total - foreign) + " of " + std::to_string(total) + " GPUs on " +
               std::to_string(free.size()) + " ready nodes (" + std::to_string(foreign) +
               " held by pods Tessera does not manage)";
  std::string list;
  for (const auto& [m, n] : models)
    list += (list.empty() ? "" : ", ") + std::to_string(n) + "x " + m;
  if (!list.empty()) cap.detail += "; " + list;
  if (dra_nodes.empty()) return cap;
  std::set<std::string> ready;
  for (const auto& [node, n] : free) {
    (void)n;
    ready.insert(node);
  }
  const DraCapacity dra = ReadDra(slices, claims, ready, cluster);
  cap.gpu_milli += dra.free_milli;
  cap.detail += "; DRA: " + Cards(dra.free_milli) + " of " + Cards(dra.total_milli) +
                " GPUs from ResourceSlices on " + std::to_string(dra.nodes.size()) +
                " ready nodes (" + std::to_string(dra.devices) + " devices, " +
                std::to_string(dra.mig) + " MIG; " + std::to_string(dra.held) +
                " held by claims Tessera does not manage)";
  list.clear();
  for (const auto& [m, n] : dra.models) list += (list.empty() ? "" : ", ") + Cards(n) + "x " + m;
  if (!list.empty()) cap.detail += "; " + list;
  return cap;
}

}  // namespace tessera::backends::kube
