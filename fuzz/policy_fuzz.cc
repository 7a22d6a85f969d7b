// The queue and quota policy loader shared by the server's config and scenarios
// (policy::ParsePolicy, policy::GetClassForms), then quota::Validate over what it accepts.
//
// The text is read into a YAML tree first, as both callers do; YAML::Load's contract is to throw
// YAML::Exception on text that is not YAML, so that (and only that) is caught around it. From
// there on every problem must come back as a Status.
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "policy/policy_yaml.h"
#include "sched/quota/policy_model.h"

namespace {

void Check(const YAML::Node& root, const tessera::policy::PolicyKeys& keys) {
  auto policy = tessera::policy::ParsePolicy(root, keys);
  if (policy.ok()) (void)tessera::quota::Validate(*policy);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(tessera::fuzz::AsText(data, size)));
  } catch (const YAML::Exception&) {
    return 0;
  }
  const YAML::Node& doc = root;
  if (!doc.IsMap()) return 0;  // both callers refuse anything else before asking for the policy
  // As a scenario reads it (other keys of its own, queues optional) and as the server does.
  Check(doc, {{"name", "nodes", "workload", "until", "cycle"}, {}, false});
  Check(doc, {{"identities", "cluster"}, {"backend", "partition", "requeue_on_loss"}, true});
  if (doc["class_forms"]) {
    (void)tessera::policy::GetClassForms(doc["class_forms"], "class_forms",
                                         tessera::quota::ClassForms::Default());
  }
  return 0;
}
