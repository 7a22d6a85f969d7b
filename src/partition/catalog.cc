#include "partition/catalog.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace tessera::partition {
namespace {

using nlohmann::json;

constexpr int64_t kMaxSlices = 64;        // far above any real part; guards the bitmasks
constexpr int64_t kMaxCount = 1'000'000;  // sanity bound for counts

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Reads typed fields of one JSON object. Every error names `where` (the model, the profile)
// and the field.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  const std::string& where() const { return where_; }

  Status Error(std::string_view key, std::string_view what) const {
    return Status::InvalidArgument("catalog: " + where_ + ": field '" + std::string(key) + "' " +
                                   std::string(what));
  }

  Status String(const char* key, std::string* out, bool required = true) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) return required ? Error(key, "is missing") : Status::Ok();
    if (!it->is_string()) return Error(key, "must be a string");
    *out = it->get<std::string>();
    if (required && out->empty()) return Error(key, "must not be empty");
    return Status::Ok();
  }

  Status Int(const char* key, int64_t min, int64_t max, int64_t* out) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) return Error(key, "is missing");
    if (!it->is_number_integer()) return Error(key, "must be an integer");
    int64_t v = it->get<int64_t>();
    if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(max)) v = max + 1;
    if (v < min || v > max) {
      return Error(key, "is " + std::to_string(v) + ", must be in [" + std::to_string(min) + ", " +
                            std::to_string(max) + "]");
    }
    *out = v;
    return Status::Ok();
  }

  Status SmallInt(const char* key, int64_t min, int64_t max, int* out) const {
    int64_t v = 0;
    Status s = Int(key, min, max, &v);
    if (s.ok()) *out = static_cast<int>(v);
    return s;
  }

  Status Bool(const char* key, bool* out, bool required = true) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) return required ? Error(key, "is missing") : Status::Ok();
    if (!it->is_boolean()) return Error(key, "must be true or false");
    *out = it->get<bool>();
    return Status::Ok();
  }

  Status Strings(const char* key, std::vector<std::string>* out, bool required = true) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) return required ? Error(key, "is missing") : Status::Ok();
    if (!it->is_array()) return Error(key, "must be a list of strings");
    for (const json& e : *it) {
      if (!e.is_string() || e.get<std::string>().empty()) {
        return Error(key, "must hold only non-empty strings");
      }
      out->push_back(e.get<std::string>());
    }
    return Status::Ok();
  }

  Status Array(const char* key, const json** out) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) return Error(key, "is missing");
    if (!it->is_array() || it->empty()) return Error(key, "must be a non-empty list");
    *out = &*it;
    return Status::Ok();
  }

  // `read(e)` for each entry e of the non-empty list `key`, each of which must be an object.
  template <typename Read>
  Status Objects(const char* key, Read read) const {
    const json* list = nullptr;
    if (Status s = Array(key, &list); !s.ok()) return s;
    for (const json& e : *list) {
      if (!e.is_object()) return Error(key, "must hold objects");
      if (Status s = read(e); !s.ok()) return s;
    }
    return Status::Ok();
  }

 private:
  const json& obj_;
  std::string where_;
};

#define TESSERA_RETURN_IF_ERROR(expr) \
  do {                                \
    ::tessera::Status _s = (expr);    \
    if (!_s.ok()) return _s;          \
  } while (0)

Status ParseProfile(const json& j, const GpuModel& model, size_t index, MigProfile* p) {
  if (!j.is_object()) {
    return Status::InvalidArgument("catalog: model " + model.name + ": profiles[" +
                                   std::to_string(index) + "] must be an object");
  }
  FieldReader head(j, "model " + model.name + ", profiles[" + std::to_string(index) + "]");
  TESSERA_RETURN_IF_ERROR(head.String("name", &p->name));
  FieldReader r(j, "model " + model.name + ", profile " + p->name);
  TESSERA_RETURN_IF_ERROR(r.Strings("aliases", &p->aliases, false));
  auto id = j.find("nvidia_smi_profile_id");
  if (id != j.end() && !id->is_null()) {
    int v = 0;
    TESSERA_RETURN_IF_ERROR(r.SmallInt("nvidia_smi_profile_id", 0, kMaxCount, &v));
    p->nvidia_smi_profile_id = v;
  }
  const MigModelInfo& dev = model.mig;
  TESSERA_RETURN_IF_ERROR(r.SmallInt("compute_slices", 1, kMaxSlices, &p->compute_slices));
  if (p->compute_slices > dev.compute_slices) {
    return r.Error("compute_slices", "is " + std::to_string(p->compute_slices) +
                                         ", more than the device's " +
                                         std::to_string(dev.compute_slices));
  }
  TESSERA_RETURN_IF_ERROR(r.SmallInt("memory_slices", 1, kMaxSlices, &p->memory_slices));
  if (p->memory_slices > dev.memory_slices) {
    return r.Error("memory_slices", "is " + std::to_string(p->memory_slices) +
                                        ", more than the device's " +
                                        std::to_string(dev.memory_slices));
  }
  TESSERA_RETURN_IF_ERROR(
      r.Int("memory_mib", 1, std::numeric_limits<int32_t>::max(), &p->memory_mib));
  if (p->memory_mib > model.memory_mib) {
    return r.Error("memory_mib", "is " + std::to_string(p->memory_mib) +
                                     " MiB, more than the device's " +
                                     std::to_string(model.memory_mib));
  }
  TESSERA_RETURN_IF_ERROR(r.SmallInt("max_instances", 1, kMaxSlices, &p->max_instances));
  const json* starts = nullptr;
  TESSERA_RETURN_IF_ERROR(r.Array("starts", &starts));
  for (const json& s : *starts) {
    if (!s.is_number_integer()) return r.Error("starts", "must hold only integers");
    int64_t v = s.get<int64_t>();
    if (v < 0 || v >= dev.memory_slices) {
      return r.Error("starts", "has start " + std::to_string(v) + ", outside memory slices 0.." +
                                   std::to_string(dev.memory_slices - 1));
    }
    if (v + p->memory_slices > dev.memory_slices) {
      return r.Error("starts", "has start " + std::to_string(v) + ": " + std::to_string(v) + " + " +
                                   std::to_string(p->memory_slices) +
                                   " memory slices exceeds the device's " +
                                   std::to_string(dev.memory_slices));
    }
    if (!p->starts.empty() && v <= p->starts.back()) {
      return r.Error("starts", "must be strictly ascending");
    }
    p->starts.push_back(static_cast<int>(v));
  }
  TESSERA_RETURN_IF_ERROR(r.Bool("media_extension", &p->media_extension));
  TESSERA_RETURN_IF_ERROR(r.Bool("inferred", &p->inferred));
  TESSERA_RETURN_IF_ERROR(r.Strings("inferred_fields", &p->inferred_fields, false));
  if (!p->inferred_fields.empty() && !p->inferred) {
    return r.Error("inferred", "is false but inferred_fields is not empty");
  }
  return Status::Ok();
}

Status ParseMig(const FieldReader& r, GpuModel* m) {
  MigModelInfo& mig = m->mig;
  TESSERA_RETURN_IF_ERROR(r.SmallInt("compute_slices", 1, kMaxSlices, &mig.compute_slices));
  TESSERA_RETURN_IF_ERROR(r.SmallInt("memory_slices", 1, kMaxSlices, &mig.memory_slices));
  TESSERA_RETURN_IF_ERROR(r.SmallInt("max_gpu_instances", 1, kMaxSlices, &mig.max_gpu_instances));
  TESSERA_RETURN_IF_ERROR(
      r.SmallInt("media_extension_limit", 0, kMaxSlices, &mig.media_extension_limit));
  TESSERA_RETURN_IF_ERROR(r.Strings("constraints", &mig.constraints, false));
  const json* profiles = nullptr;
  TESSERA_RETURN_IF_ERROR(r.Array("profiles", &profiles));
  std::set<std::string> names;
  for (size_t i = 0; i < profiles->size(); ++i) {
    MigProfile p;
    TESSERA_RETURN_IF_ERROR(ParseProfile((*profiles)[i], *m, i, &p));
    std::vector<std::string> all = p.aliases;
    all.push_back(p.name);
    for (const std::string& n : all) {
      if (!names.insert(Lower(n)).second) {
        return Status::InvalidArgument("catalog: model " + m->name + ", profile " + p.name +
                                       ": field 'name' or 'aliases': '" + n +
                                       "' is used twice in this model");
      }
    }
    mig.profiles.push_back(std::move(p));
  }
  return Status::Ok();
}

// The AMD modes listed under `key`, objects with a name (`what` says which kind in errors): each
// read by `read(nr, &mode)`, nr naming the mode, and appended to *modes. A name listed twice (in
// any case) is refused.
template <typename Mode, typename Read>
Status ParseAmdModes(const FieldReader& r, const char* key, const std::string& what,
                     std::vector<Mode>* modes, Read read) {
  return r.Objects(key, [&](const json& e) -> Status {
    Mode mode;
    TESSERA_RETURN_IF_ERROR(FieldReader(e, r.where() + ", " + what).String("name", &mode.name));
    FieldReader nr(e, r.where() + ", " + what + " " + mode.name);
    TESSERA_RETURN_IF_ERROR(read(nr, &mode));
    for (const Mode& m : *modes) {
      if (EqualsIgnoreCase(m.name, mode.name)) {
        return r.Error(key, "lists " + mode.name + " twice");
      }
    }
    modes->push_back(mode);
    return Status::Ok();
  });
}

Status ParseAmdMemoryModes(const FieldReader& r, AmdModelInfo* amd) {
  return ParseAmdModes(r, "memory_modes", "memory mode", &amd->memory_modes,
                       [](const FieldReader& nr, AmdMemoryMode* mode) {
                         return nr.SmallInt("domains", 1, kMaxSlices, &mode->domains);
                       });
}

// A compute mode's partitions, `per_partition` each of them, must make up the device's `total`
// (`unit`: "XCDs", "CUs").
Status FillsDevice(const FieldReader& nr, const char* key, int partitions, int per_partition,
                   int total, const char* unit) {
  if (partitions * per_partition == total) return Status::Ok();
  return nr.Error(key, "times partitions is " + std::to_string(partitions * per_partition) +
                           ", not the device's " + std::to_string(total) + " " + unit);
}

Status ParseAmdComputeModes(const FieldReader& r, AmdModelInfo* amd) {
  return ParseAmdModes(
      r, "compute_modes", "compute mode", &amd->compute_modes,
      [&](const FieldReader& nr, AmdComputeMode* mode) -> Status {
        TESSERA_RETURN_IF_ERROR(nr.SmallInt("partitions", 1, kMaxSlices, &mode->partitions));
        TESSERA_RETURN_IF_ERROR(
            nr.SmallInt("xcds_per_partition", 1, kMaxSlices, &mode->xcds_per_partition));
        TESSERA_RETURN_IF_ERROR(
            nr.SmallInt("cus_per_partition", 1, kMaxCount, &mode->cus_per_partition));
        TESSERA_RETURN_IF_ERROR(FillsDevice(nr, "xcds_per_partition", mode->partitions,
                                            mode->xcds_per_partition, amd->xcd_count, "XCDs"));
        return FillsDevice(nr, "cus_per_partition", mode->partitions, mode->cus_per_partition,
                           amd->cus, "CUs");
      });
}

Status ParseAmdLegalPairs(const FieldReader& r, AmdModelInfo* amd) {
  return r.Objects("legal_pairs", [&](const json& e) -> Status {
    FieldReader pr(e, r.where() + ", legal pair");
    std::string compute, memory;
    TESSERA_RETURN_IF_ERROR(pr.String("compute", &compute));
    TESSERA_RETURN_IF_ERROR(pr.String("memory", &memory));
    const AmdComputeMode* c = amd->FindComputeMode(compute);
    const AmdMemoryMode* mm = amd->FindMemoryMode(memory);
    if (c == nullptr) {
      return r.Error("legal_pairs", "names unknown compute mode " + compute);
    }
    if (mm == nullptr) {
      return r.Error("legal_pairs", "names unknown memory mode " + memory);
    }
    if (mm->domains > c->partitions) {
      return r.Error("legal_pairs", "has " + c->name + "+" + mm->name + ": memory partitions (" +
                                        std::to_string(mm->domains) +
                                        ") exceed compute partitions (" +
                                        std::to_string(c->partitions) + ")");
    }
    for (const auto& [pc, pm] : amd->legal_pairs) {
      if (pc == c->name && pm == mm->name) {
        return r.Error("legal_pairs", "lists " + c->name + "+" + mm->name + " twice");
      }
    }
    amd->legal_pairs.emplace_back(c->name, mm->name);
    return Status::Ok();
  });
}

Status ParseAmd(const FieldReader& r, GpuModel* m) {
  AmdModelInfo& amd = m->amd;
  TESSERA_RETURN_IF_ERROR(r.SmallInt("xcd_count", 1, kMaxSlices, &amd.xcd_count));
  TESSERA_RETURN_IF_ERROR(r.SmallInt("cus", 1, kMaxCount, &amd.cus));
  TESSERA_RETURN_IF_ERROR(ParseAmdMemoryModes(r, &amd));
  TESSERA_RETURN_IF_ERROR(ParseAmdComputeModes(r, &amd));
  TESSERA_RETURN_IF_ERROR(ParseAmdLegalPairs(r, &amd));
  TESSERA_RETURN_IF_ERROR(r.Strings("validated_pairs", &amd.validated_pairs, false));
  for (const std::string& v : amd.validated_pairs) {
    bool found = false;
    for (const auto& [pc, pm] : amd.legal_pairs)
      found = found || EqualsIgnoreCase(v, pc + "+" + pm);
    if (!found) return r.Error("validated_pairs", "has " + v + ", which is not a legal pair");
  }
  return Status::Ok();
}

Status ParseModel(const json& j, size_t index, GpuModel* m) {
  if (!j.is_object()) {
    return Status::InvalidArgument("catalog: models[" + std::to_string(index) +
                                   "] must be an object");
  }
  FieldReader head(j, "models[" + std::to_string(index) + "]");
  TESSERA_RETURN_IF_ERROR(head.String("name", &m->name));
  FieldReader r(j, "model " + m->name);
  TESSERA_RETURN_IF_ERROR(r.String("vendor", &m->vendor));
  std::string kind;
  TESSERA_RETURN_IF_ERROR(r.String("kind", &kind));
  if (kind == "mig") {
    m->kind = GpuKind::kMig;
  } else if (kind == "amd") {
    m->kind = GpuKind::kAmd;
  } else {
    return r.Error("kind", "is '" + kind + "', must be 'mig' or 'amd'");
  }
  TESSERA_RETURN_IF_ERROR(r.Strings("aliases", &m->aliases, false));
  TESSERA_RETURN_IF_ERROR(r.String("architecture", &m->architecture, false));
  TESSERA_RETURN_IF_ERROR(
      r.Int("memory_mib", 1, std::numeric_limits<int32_t>::max(), &m->memory_mib));
  TESSERA_RETURN_IF_ERROR(r.Bool("inferred", &m->inferred));
  TESSERA_RETURN_IF_ERROR(r.Strings("inferred_fields", &m->inferred_fields, false));
  return m->is_mig() ? ParseMig(r, m) : ParseAmd(r, m);
}

}  // namespace

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

const MigProfile* MigModelInfo::FindProfile(std::string_view name) const {
  int i = ProfileIndex(name);
  return i < 0 ? nullptr : &profiles[static_cast<size_t>(i)];
}

int MigModelInfo::ProfileIndex(std::string_view name) const {
  for (size_t i = 0; i < profiles.size(); ++i) {
    if (EqualsIgnoreCase(profiles[i].name, name)) return static_cast<int>(i);
  }
  for (size_t i = 0; i < profiles.size(); ++i) {
    for (const std::string& a : profiles[i].aliases) {
      if (EqualsIgnoreCase(a, name)) return static_cast<int>(i);
    }
  }
  return -1;
}

std::string MigModelInfo::ProfileNames() const { return JoinedNames(profiles); }

const AmdMemoryMode* AmdModelInfo::FindMemoryMode(std::string_view name) const {
  for (const AmdMemoryMode& m : memory_modes) {
    if (EqualsIgnoreCase(m.name, name)) return &m;
  }
  return nullptr;
}

const AmdComputeMode* AmdModelInfo::FindComputeMode(std::string_view name) const {
  for (const AmdComputeMode& m : compute_modes) {
    if (EqualsIgnoreCase(m.name, name)) return &m;
  }
  return nullptr;
}

bool GpuModel::AnyInferred() const {
  if (inferred) return true;
  for (const MigProfile& p : mig.profiles) {
    if (p.inferred) return true;
  }
  return false;
}

Result<Catalog> Catalog::FromJson(std::string_view json_text) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("catalog: not valid JSON: ") + e.what());
  }
  if (!root.is_object()) return Status::InvalidArgument("catalog: top level must be an object");
  FieldReader top(root, "top level");
  int64_t version = 0;
  TESSERA_RETURN_IF_ERROR(top.Int("schema_version", 1, 1, &version));
  const json* models = nullptr;
  TESSERA_RETURN_IF_ERROR(top.Array("models", &models));
  Catalog catalog;
  std::set<std::string> names;
  for (size_t i = 0; i < models->size(); ++i) {
    GpuModel m;
    TESSERA_RETURN_IF_ERROR(ParseModel((*models)[i], i, &m));
    std::vector<std::string> all = m.aliases;
    all.push_back(m.name);
    for (const std::string& n : all) {
      if (!names.insert(Lower(n)).second) {
        return Status::InvalidArgument("catalog: model " + m.name +
                                       ": field 'name' or 'aliases': '" + n +
                                       "' is already used by another model");
      }
    }
    catalog.models_.push_back(std::move(m));
  }
  return catalog;
}

const Catalog& Catalog::BuiltIn() {
  static const Catalog* catalog = [] {
    Result<Catalog> parsed = FromJson(BuiltInCatalogJson());
    if (!parsed.ok()) {
      std::fprintf(stderr, "tessera: the embedded catalog is broken: %s\n",
                   parsed.status().message().c_str());
      std::abort();
    }
    return new Catalog(std::move(parsed).value());
  }();
  return *catalog;
}

const GpuModel* Catalog::Find(std::string_view name) const {
  for (const GpuModel& m : models_) {
    if (EqualsIgnoreCase(m.name, name)) return &m;
  }
  for (const GpuModel& m : models_) {
    for (const std::string& a : m.aliases) {
      if (EqualsIgnoreCase(a, name)) return &m;
    }
  }
  return nullptr;
}

Result<const GpuModel*> Catalog::Lookup(std::string_view name) const {
  const GpuModel* m = Find(name);
  if (m == nullptr) {
    return Status::NotFound("unknown GPU model '" + std::string(name) +
                            "'; known models: " + ModelNames());
  }
  return m;
}

std::string Catalog::ModelNames() const { return JoinedNames(models_); }

}  // namespace tessera::partition
