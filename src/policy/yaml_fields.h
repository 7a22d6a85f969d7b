// Typed reads of YAML fields where every error names the field path ("groups[a].limit.gpu: ...").
// Shared by the policy loader, the server's config and scenarios, so the same mistake reads the
// same everywhere.
//
// Thread-safety: pure functions.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "model/cluster.h"
#include "model/resources.h"

namespace tessera::policy {

Status FieldError(const std::string& field, const std::string& what);
std::string Scalar(const YAML::Node& n);
// Durations in the one grammar (model/duration.h: "500ms", "30s", "1.5m", "1h30m", "7d", "90"):
// GetDuration for a field kept in whole seconds (a sub-second value is refused, naming the
// field), GetDurationMs for one kept in milliseconds.
Result<int64_t> GetDuration(const YAML::Node& n, const std::string& field);  // seconds
Result<int64_t> GetDurationMs(const YAML::Node& n, const std::string& field);
Result<MiB> GetMemory(const YAML::Node& n, const std::string& field);
Result<int64_t> GetMilli(const YAML::Node& n, const std::string& field);
Result<int64_t> GetInt(const YAML::Node& n, const std::string& field);
Result<bool> GetBool(const YAML::Node& n, const std::string& field);
Result<std::string> GetString(const YAML::Node& n, const std::string& field);
Result<std::vector<std::string>> GetStrings(const YAML::Node& n, const std::string& field);
Result<std::vector<AllocationForm>> GetForms(const YAML::Node& n, const std::string& field);
// {gpu, gpu_memory, cpu, memory}; components not given keep their value in `base`.
Result<Resources> GetResources(const YAML::Node& n, const std::string& field, Resources base);
// A map must have only these keys, so a typo is an error rather than a silent default.
Status KnownKeys(const YAML::Node& n, const std::string& field, const std::set<std::string>& keys);
// The entry's name for field paths, else its index.
std::string EntryName(const YAML::Node& n, size_t i);
// Every map under `n`, at any depth, names each of its keys once (`field`: the path to `n`, ""
// at the top). YAML keeps the first of a repeated key and drops the others without a word, so
// an override added at the end of a file would do nothing.
Status UniqueKeys(const YAML::Node& n, const std::string& field);

#define TESSERA_TRY_ASSIGN(lhs, expr) \
  do {                                \
    auto _r = (expr);                 \
    if (!_r.ok()) return _r.status(); \
    lhs = *_r;                        \
  } while (0)
#define TESSERA_TRY(expr)    \
  do {                       \
    Status _s = (expr);      \
    if (!_s.ok()) return _s; \
  } while (0)

}  // namespace tessera::policy
