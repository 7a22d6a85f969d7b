// Reports of simulation results: a table for people, CSV, and an SVG chart of the
// unallocated-GPU curve against arrived workload.
#pragma once

#include <string>
#include <vector>

#include "sim/replay.h"

namespace tessera::sim {

inline constexpr int kReportPoints[] = {90, 95, 100, 110, 120, 130};

// One line per policy: mean / median / sd at each report point.
std::string FormatTable(const std::string& trace, const std::vector<SeedSweep>& sweeps);
// trace,policy,arrived_pct,unalloc_mean,unalloc_median,unalloc_sd,n_seeds for 0..130.
std::string FormatCsv(const std::string& trace, const std::vector<SeedSweep>& sweeps);
// Mean unallocated GPU % against arrived % (0..130) per policy, with the ideal line.
std::string RenderSvg(const std::string& title, const std::vector<SeedSweep>& sweeps);

}  // namespace tessera::sim
