#include "policy/yaml_fields.h"

#include "model/duration.h"
#include "model/quantity.h"
#include "sched/quota/policy_model.h"

namespace tessera::policy {

Status FieldError(const std::string& field, const std::string& what) {
  return Status::InvalidArgument(field + ": " + what);
}

std::string Scalar(const YAML::Node& n) { return n.as<std::string>(); }

namespace {

// A scalar read by `parse` (a Result); `expected` is the error for a node that is not a scalar.
template <typename Parse>
auto GetParsed(const YAML::Node& n, const std::string& field, const char* expected, Parse parse)
    -> decltype(parse(std::string())) {
  if (!n.IsScalar()) return FieldError(field, expected);
  auto v = parse(Scalar(n));
  if (!v.ok()) return FieldError(field, v.status().message());
  return v;
}

}  // namespace

Result<int64_t> GetDuration(const YAML::Node& n, const std::string& field) {
  return GetParsed(n, field, "expected a duration such as 30s or 2h", ParseDurationSeconds);
}

Result<int64_t> GetDurationMs(const YAML::Node& n, const std::string& field) {
  return GetParsed(n, field, "expected a duration such as 500ms or 10s", ParseDurationMs);
}

Result<MiB> GetMemory(const YAML::Node& n, const std::string& field) {
  return GetParsed(n, field, "expected a quantity such as 8GiB", ParseMemoryMiB);
}

Result<int64_t> GetMilli(const YAML::Node& n, const std::string& field) {
  return GetParsed(n, field, "expected a number such as 0.25 or 500m", ParseMilli);
}

Result<int64_t> GetInt(const YAML::Node& n, const std::string& field) {
  return GetParsed(n, field, "expected a whole number", ParseNonNegativeInt);
}

Result<bool> GetBool(const YAML::Node& n, const std::string& field) {
  std::string s = n.IsScalar() ? Scalar(n) : "";
  if (s == "true" || s == "yes") return true;
  if (s == "false" || s == "no") return false;
  return FieldError(field, "expected true or false");
}

Result<std::string> GetString(const YAML::Node& n, const std::string& field) {
  if (!n.IsScalar()) return FieldError(field, "expected a string");
  return Scalar(n);
}

Result<std::vector<std::string>> GetStrings(const YAML::Node& n, const std::string& field) {
  std::vector<std::string> out;
  if (n.IsScalar()) {
    out.push_back(Scalar(n));
    return out;
  }
  if (!n.IsSequence()) return FieldError(field, "expected a list");
  for (const auto& x : n) {
    if (!x.IsScalar()) return FieldError(field, "expected a list of names");
    out.push_back(Scalar(x));
  }
  return out;
}

Result<std::vector<AllocationForm>> GetForms(const YAML::Node& n, const std::string& field) {
  auto names = GetStrings(n, field);
  if (!names.ok()) return names.status();
  std::vector<AllocationForm> out;
  for (const std::string& s : *names) {
    auto f = quota::ParseAllocationForm(s);
    if (!f.ok()) return FieldError(field, f.status().message());
    out.push_back(*f);
  }
  return out;
}

Result<Resources> GetResources(const YAML::Node& n, const std::string& field, Resources r) {
  TESSERA_TRY(KnownKeys(n, field, {"gpu", "gpu_memory", "cpu", "memory"}));
  if (n["gpu"]) TESSERA_TRY_ASSIGN(r.gpu_milli, GetMilli(n["gpu"], field + ".gpu"));
  if (n["gpu_memory"]) {
    TESSERA_TRY_ASSIGN(r.gpu_memory_mib, GetMemory(n["gpu_memory"], field + ".gpu_memory"));
  }
  if (n["cpu"]) TESSERA_TRY_ASSIGN(r.cpu_milli, GetMilli(n["cpu"], field + ".cpu"));
  if (n["memory"]) TESSERA_TRY_ASSIGN(r.memory_mib, GetMemory(n["memory"], field + ".memory"));
  return r;
}

Status KnownKeys(const YAML::Node& n, const std::string& field, const std::set<std::string>& keys) {
  if (!n.IsMap()) return FieldError(field, "expected a map");
  for (const auto& kv : n) {
    std::string k = Scalar(kv.first);
    if (!keys.count(k)) return FieldError(field, "unknown key '" + k + "'");
  }
  return Status::Ok();
}

std::string EntryName(const YAML::Node& n, size_t i) {
  return n.IsMap() && n["name"] && n["name"].IsScalar() ? Scalar(n["name"]) : std::to_string(i);
}

Status UniqueKeys(const YAML::Node& n, const std::string& field) {
  if (n.IsMap()) {
    std::set<std::string> seen;
    for (const auto& kv : n) {
      const std::string key = kv.first.IsScalar() ? Scalar(kv.first) : "?";
      const std::string at = field.empty() ? key : field + "." + key;
      if (!seen.insert(key).second) {
        const YAML::Mark m = kv.first.Mark();
        return FieldError(at, "given twice (again at line " + std::to_string(m.line + 1) +
                                  ", column " + std::to_string(m.column + 1) + ")");
      }
      TESSERA_TRY(UniqueKeys(kv.second, at));
    }
  } else if (n.IsSequence()) {
    size_t i = 0;
    for (const auto& entry : n) {
      TESSERA_TRY(UniqueKeys(entry, field + "[" + EntryName(entry, i) + "]"));
      ++i;
    }
  }
  return Status::Ok();
}

}  // namespace tessera::policy
