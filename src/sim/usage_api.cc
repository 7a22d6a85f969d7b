// POST /v1/whatif/usage's replay (usage_api.h).
#include "sim/usage_api.h"

#include "partition/catalog.h"
#include "sim/usage_whatif.h"

namespace tessera::sim::usage {

Result<nlohmann::json> WhatIfUsageReport(std::string_view history,
                                         const std::map<std::string, std::string>& params) {
  WhatIfOptions o;
  std::string source = "upload";
  for (const auto& [key, value] : params) {
    if (key == "card") {
      auto model = partition::Catalog::BuiltIn().Lookup(value);
      if (!model.ok()) return Status::InvalidArgument("card: " + model.status().message());
      o.card = value;
    } else if (key == "host_gbps") {
      int64_t v = 0;
      if (!ParseDecimal(value, 1000, &v) || v < 1)
        return Status::InvalidArgument("host_gbps: '" + value +
                                       "' is not a positive number of GB/s");
      o.host_mbps = v;
    } else if (key == "headroom") {
      int64_t v = 0;
      if (!ParseDecimal(value, 1, &v) || v > 1000 || value.find('.') != std::string::npos)
        return Status::InvalidArgument("headroom: '" + value +
                                       "' is not a whole percentage from 0 to 1000");
      o.headroom_pct = static_cast<int>(v);
    } else if (key == "name") {
      if (!value.empty()) source = value;
    } else {
      return Status::InvalidArgument("unknown parameter '" + key +
                                     "' (card, host_gbps, headroom, name)");
    }
  }
  if (history.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return Status::InvalidArgument(
        source +
        ": the usage history is empty: send the CSV "
        "(workload,timestamp,gpu_util_pct,gpu_memory_bytes) or a Prometheus range-query answer "
        "as the request's body");
  }
  History h;
  if (Status s = ParseUsage(history, source, &h); !s.ok()) return s;
  auto r = RunWhatIfUsage(std::move(h), o);
  if (!r.ok()) return r.status();
  nlohmann::json j = nlohmann::json::parse(UsageJson(*r), nullptr, false);
  if (j.is_discarded()) return Status::Internal("the what-if report is not JSON");
  return j;
}

}  // namespace tessera::sim::usage
