// A scenario's class-to-form table changed, the old entries kept as its comparison run
// (`tessera whatif --forms`).
#include <yaml-cpp/yaml.h>

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

}  // namespace tessera::sim
