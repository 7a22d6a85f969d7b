// A scenario's class-to-form table changed, the old entries kept as its comparison run
// (`tessera whatif --forms`).
#include <yaml-cpp/yaml.h>

#include <map>
#include <nlohmann/json.hpp>

#include "sim/scenario.h"

namespace tessera::sim {

// The scenario with `forms` applied: the what-if table as the scenario's own, and the
// server's table for those classes as `compare_with` (so `tessera sim scenario` on the emitted
// file runs exactly this comparison).
Result<std::string> WithClassForms(const std::string& observed,
                                   const std::vector<std::string>& forms) {
  if (forms.empty()) return observed;
  auto base = ParseScenario(observed);
  if (!base.ok())
    return Status::InvalidArgument("the scenario does not parse: " + base.status().message());
  YAML::Node doc = YAML::Load(observed);
  YAML::Node compare;
  compare["name"] = "as-configured";
  for (const std::string& f : forms) {
    const size_t eq = f.find('=');
    if (eq == std::string::npos)
      return Status::InvalidArgument("class forms '" + f + "': expected CLASS=FORM[,FORM]");
    const std::string cls_name = f.substr(0, eq);
    auto cls = quota::ParseWorkloadClass(cls_name);
    if (!cls.ok())
      return Status::InvalidArgument("class forms '" + f + "': " + cls.status().message());
    YAML::Node list(YAML::NodeType::Sequence);
    std::string rest = f.substr(eq + 1);
    while (!rest.empty()) {
      const std::string form = rest.substr(0, rest.find(','));
      rest = rest.find(',') == std::string::npos ? "" : rest.substr(rest.find(',') + 1);
      auto parsed = quota::ParseAllocationForm(form);
      if (!parsed.ok())
        return Status::InvalidArgument("class forms '" + f + "': " + parsed.status().message());
      list.push_back(form);
    }
    if (list.size() == 0) return Status::InvalidArgument("class forms '" + f + "': no form");
    doc["class_forms"][cls_name] = list;
    YAML::Node was(YAML::NodeType::Sequence);
    for (AllocationForm a : base->policy.class_forms.of(*cls)) was.push_back(AllocationFormName(a));
    compare["class_forms"][cls_name] = was;
  }
  doc["compare_with"] = compare;
  doc["name"] = "what-if";
  YAML::Emitter e;
  e << doc;
  return std::string(e.c_str());
}

Result<WhatIfResult> WhatIf(const nlohmann::json& observed, const std::vector<std::string>& forms) {
  using Json = nlohmann::json;
  if (!observed.is_object() || !observed.contains("scenario") ||
      !observed["scenario"].is_string()) {
    return Status::InvalidArgument("not an observed workload (no 'scenario')");
  }
  WhatIfResult out;
  Result<std::string> text = WithClassForms(observed["scenario"].get<std::string>(), forms);
  if (!text.ok()) return text.status();
  out.scenario = *text;
  auto scenario = ParseScenario(out.scenario);
  if (!scenario.ok()) return scenario.status();
  auto report = RunScenario(*scenario);
  if (!report.ok()) return report.status();
  // Cards per class: observed (peak devices held at once), as configured, what-if.
  const Json obs_all = observed.value("observed", Json::object());
  std::map<std::string, const ClassReport*> as_configured, what_if;
  for (const auto& c : report->run.classes) what_if[c.name] = &c;
  if (report->baseline) {
    for (const auto& c : report->baseline->classes) as_configured[c.name] = &c;
  }
  Json r = {{"since_ms", observed.value("since_ms", int64_t{0})},
            {"until_ms", observed.value("until_ms", int64_t{0})},
            {"jobs", observed.value("jobs", int64_t{0})},
            {"jobs_not_replayed", observed.value("jobs_not_replayed", int64_t{0})},
            {"forms", forms},
            {"classes", Json::object()}};
  int64_t returned_total = 0;
  for (const auto& [name, c] : what_if) {
    const ClassReport* base = as_configured.count(name) ? as_configured[name] : c;
    const Json obs = obs_all.value(name, Json::object());
    const int64_t returned = base->max_devices - c->max_devices;
    returned_total += returned;
    r["classes"][name] = {{"jobs", c->jobs},
                          {"observed_cards", obs.value("max_devices", 0)},
                          {"as_configured_cards", base->max_devices},
                          {"what_if_cards", c->max_devices},
                          {"returned", returned},
                          {"observed_wait_p99_s", obs.value("wait_p99_s", 0)},
                          {"as_configured_wait_p99_s", base->wait_p99_s},
                          {"what_if_wait_p99_s", c->wait_p99_s}};
  }
  r["returned"] = returned_total;
  r["report"] = Json::parse(ReportJson(*report), nullptr, false);
  out.report = std::move(r);
  out.text = ReportText(*report);
  return out;
}

Result<nlohmann::json> WhatIfReport(const nlohmann::json& observed,
                                    const std::vector<std::string>& forms) {
  Result<WhatIfResult> r = WhatIf(observed, forms);
  if (!r.ok()) return r.status();
  return std::move(r->report);
}

}  // namespace tessera::sim
