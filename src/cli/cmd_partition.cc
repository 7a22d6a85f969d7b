// `tessera partition plan|geometries`: the partition engine from the command line.
#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/table.h"
#include "model/quantity.h"
#include "partition/amd.h"
#include "partition/catalog.h"
#include "partition/mig.h"

namespace tessera::cli {
namespace {

using nlohmann::json;
using partition::Catalog;
using partition::GpuModel;

struct Options {
  std::string gpu;
  std::string want;
  std::string existing;  // MIG: "1g.5gb@4,2g.10gb@0"
  bool json = false;
};

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kResourceExhausted:
    case StatusCode::kFailedPrecondition:
      return kExitUnsatisfiable;
    default:
      return kExitBadInput;
  }
}

void Fail(CommandContext& ctx, const Status& s) {
  std::cerr << "tessera: " << s.message() << "\n";
  ctx.exit_code = ExitCodeFor(s);
}

// Splits "a,b,c" into items, trimming spaces. Empty items are an error naming the position.
Result<std::vector<std::string>> SplitList(const std::string& text, const char* option) {
  std::vector<std::string> items;
  size_t pos = 0;
  while (true) {
    size_t comma = text.find(',', pos);
    std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t b = item.find_first_not_of(" \t");
    size_t e = item.find_last_not_of(" \t");
    item = (b == std::string::npos) ? "" : item.substr(b, e - b + 1);
    if (item.empty()) {
      return Status::InvalidArgument("malformed " + std::string(option) + " '" + text + "': item " +
                                     std::to_string(items.size() + 1) + " is empty");
    }
    items.push_back(item);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return items;
}

std::string SliceRange(int start, int size) {
  return size == 1 ? std::to_string(start)
                   : std::to_string(start) + "-" + std::to_string(start + size - 1);
}

std::string SliceRuler(int slices) {
  std::string out;
  for (int i = 0; i < slices; ++i) {
    std::string n = std::to_string(i);
    const size_t width = static_cast<size_t>(partition::kSliceMapWidth);
    out += n + std::string(width - std::min(n.size(), width - 1), ' ');
  }
  return out;
}

// Parses "--existing 1g.5gb@4,2g.10gb@0".
Result<partition::Layout> ParseExisting(const std::string& text) {
  partition::Layout layout;
  if (text.empty()) return layout;
  Result<std::vector<std::string>> items = SplitList(text, "--existing");
  if (!items.ok()) return items.status();
  for (const std::string& item : *items) {
    size_t at = item.find('@');
    Result<int64_t> start = at == std::string::npos
                                ? Result<int64_t>(Status::InvalidArgument("no '@'"))
                                : ParseNonNegativeInt(item.substr(at + 1));
    if (!start.ok() || at == 0 || *start > 1024) {
      return Status::InvalidArgument("malformed --existing item '" + item +
                                     "': want PROFILE@START, e.g. 1g.5gb@4");
    }
    layout.instances.push_back({item.substr(0, at), static_cast<int>(*start)});
  }
  return layout;
}

void PlanMig(const GpuModel& m, const std::vector<std::string>& wants, const Options& o,
             CommandContext& ctx) {
  Result<partition::Layout> existing = ParseExisting(o.existing);
  if (!existing.ok()) return Fail(ctx, existing.status());
  Result<partition::MigPlan> plan = partition::Plan(m, wants, *existing);
  if (!plan.ok()) return Fail(ctx, plan.status());
  std::vector<partition::Instance> placed = plan->placed;
  std::stable_sort(placed.begin(), placed.end(),
                   [](const auto& a, const auto& b) { return a.start < b.start; });
  const std::string map = partition::SliceMap(m, plan->layout);
  if (o.json) {
    json instances = json::array();
    for (const partition::Instance& i : placed) {
      const partition::MigProfile* p = m.mig.FindProfile(i.profile);
      instances.push_back(
          {{"profile", p->name},
           {"start", i.start},
           {"memory_slices", p->memory_slices},
           {"compute_slices", p->compute_slices},
           {"memory_mib", p->memory_mib},
           {"nvidia_smi_profile_id",
            p->nvidia_smi_profile_id ? json(*p->nvidia_smi_profile_id) : json(nullptr)}});
    }
    json kept = json::array();
    for (const partition::Instance& i : existing->instances) {
      kept.push_back({{"profile", m.mig.FindProfile(i.profile)->name}, {"start", i.start}});
    }
    json out = {
        {"gpu", m.name},          {"kind", "mig"},    {"memory_slices", m.mig.memory_slices},
        {"instances", instances}, {"existing", kept}, {"slice_map", map}};
    std::cout << out.dump(2) << "\n";
    ctx.exit_code = kExitOk;
    return;
  }
  std::cout << m.name << ": " << placed.size() << " GPU instance" << (placed.size() == 1 ? "" : "s")
            << " with explicit starts\n\n";
  std::vector<std::vector<std::string>> rows = {
      {"PROFILE", "START", "MEM-SLICES", "COMPUTE", "MEMORY", "SMI-ID"}};
  for (const partition::Instance& i : placed) {
    const partition::MigProfile* p = m.mig.FindProfile(i.profile);
    rows.push_back({p->name, std::to_string(i.start), SliceRange(i.start, p->memory_slices),
                    std::to_string(p->compute_slices), FormatMiB(p->memory_mib),
                    p->nvidia_smi_profile_id ? std::to_string(*p->nvidia_smi_profile_id) : "-"});
  }
  PrintTable(rows);
  if (!existing->empty()) std::cout << "\nexisting: " << existing->ToString() << "\n";
  std::cout << "\nslice  " << SliceRuler(m.mig.memory_slices) << "\n"
            << "map    " << map << "\n";
  ctx.exit_code = kExitOk;
}

void PrintAmdPlan(const GpuModel& m, const partition::AmdPartitioning& p,
                  const std::vector<MiB>& wants, const Options& o, CommandContext& ctx) {
  if (o.json) {
    json assignments = json::array();
    for (size_t i = 0; i < wants.size(); ++i) {
      assignments.push_back({{"partition", i}, {"want_mib", wants[i]}});
    }
    json out = {{"gpu", m.name},
                {"kind", "amd"},
                {"pair", p.pair.ToString()},
                {"compute_mode", p.pair.compute},
                {"memory_mode", p.pair.memory},
                {"partitions", p.partitions},
                {"memory_per_partition_mib", p.memory_per_partition_mib},
                {"xcds_per_partition", p.xcds_per_partition},
                {"cus_per_partition", p.cus_per_partition},
                {"memory_domains", p.memory_domains},
                {"amd_validated", p.validated},
                {"assignments", assignments}};
    std::cout << out.dump(2) << "\n";
    ctx.exit_code = kExitOk;
    return;
  }
  std::cout << m.name << ": " << p.pair.ToString() << " -> " << p.partitions << " partition"
            << (p.partitions == 1 ? "" : "s") << " x " << FormatMiB(p.memory_per_partition_mib)
            << " (" << p.xcds_per_partition << " XCD" << (p.xcds_per_partition == 1 ? "" : "s")
            << ", " << p.cus_per_partition << " CUs each; " << p.memory_domains << " memory domain"
            << (p.memory_domains == 1 ? "" : "s") << (p.validated ? "; AMD-validated" : "")
            << ")\n";
  if (!wants.empty()) {
    std::cout << "\n";
    std::vector<std::vector<std::string>> rows = {{"PARTITION", "WANT", "SIZE"}};
    for (size_t i = 0; i < wants.size(); ++i) {
      rows.push_back(
          {std::to_string(i), FormatMiB(wants[i]), FormatMiB(p.memory_per_partition_mib)});
    }
    PrintTable(rows);
    if (static_cast<size_t>(p.partitions) > wants.size()) {
      std::cout << (static_cast<size_t>(p.partitions) - wants.size()) << " partition"
                << (static_cast<size_t>(p.partitions) - wants.size() == 1 ? "" : "s")
                << " left free\n";
    }
  }
  ctx.exit_code = kExitOk;
}

void PlanAmd(const GpuModel& m, const std::vector<std::string>& items, const Options& o,
             CommandContext& ctx) {
  // A single "COMPUTE+MEMORY" item asks for that pair; otherwise every item is a size.
  if (items.size() == 1 && items[0].find('+') != std::string::npos) {
    Result<partition::AmdPair> pair = partition::ParsePair(m, items[0]);
    if (!pair.ok()) return Fail(ctx, pair.status());
    Result<partition::AmdPartitioning> p = partition::Partition(m, *pair);
    if (!p.ok()) {
      // A well-formed pair that the device does not accept cannot be met.
      return Fail(ctx, Status::ResourceExhausted(p.status().message()));
    }
    return PrintAmdPlan(m, *p, {}, o, ctx);
  }
  std::vector<MiB> wants;
  for (const std::string& item : items) {
    if (item.find('+') != std::string::npos) {
      return Fail(ctx, Status::InvalidArgument("--want for " + m.name +
                                               " takes either one mode pair (e.g. CPX+NPS4) "
                                               "or memory sizes, not both: '" +
                                               item + "'"));
    }
    Result<MiB> mib = ParseMemoryMiB(item);
    if (!mib.ok()) {
      return Fail(ctx, Status::InvalidArgument("--want for " + m.name +
                                               " takes memory sizes like 24GiB or a pair like "
                                               "CPX+NPS4: " +
                                               mib.status().message()));
    }
    wants.push_back(*mib);
  }
  Result<partition::AmdPartitioning> p = partition::PlanAmd(m, wants);
  if (!p.ok()) return Fail(ctx, p.status());
  PrintAmdPlan(m, *p, wants, o, ctx);
}

std::string MultisetText(const partition::ProfileMultiset& set) {
  std::string out;
  size_t i = 0;
  while (i < set.size()) {
    size_t j = i;
    while (j < set.size() && set[j] == set[i]) ++j;
    out += (out.empty() ? "" : " + ") + (j - i > 1 ? std::to_string(j - i) + " x " : "") + set[i];
    i = j;
  }
  return out;
}

void Geometries(const GpuModel& m, const Options& o, CommandContext& ctx) {
  if (m.is_amd()) {
    std::vector<partition::AmdPartitioning> all = partition::AllPartitionings(m);
    if (o.json) {
      json out = json::array();
      for (const auto& p : all) {
        out.push_back({{"pair", p.pair.ToString()},
                       {"partitions", p.partitions},
                       {"memory_per_partition_mib", p.memory_per_partition_mib}});
      }
      std::cout << json{{"gpu", m.name}, {"kind", "amd"}, {"geometries", out}}.dump(2) << "\n";
    } else {
      std::cout << m.name << ": " << all.size() << " legal (compute, memory) pairs\n\n";
      std::vector<std::vector<std::string>> rows = {{"PAIR", "PARTITIONS", "MEMORY/PARTITION"}};
      for (const auto& p : all) {
        rows.push_back({p.pair.ToString(), std::to_string(p.partitions),
                        FormatMiB(p.memory_per_partition_mib)});
      }
      PrintTable(rows);
    }
    ctx.exit_code = kExitOk;
    return;
  }
  std::vector<partition::Geometry> geometries = partition::MaximalGeometries(m);
  json out = json::array();
  std::vector<std::vector<std::string>> rows = {{"#", "PROFILES", "EXAMPLE LAYOUT"}};
  for (size_t i = 0; i < geometries.size(); ++i) {
    const partition::Geometry& g = geometries[i];
    partition::Layout example = g.example;
    std::sort(example.instances.begin(), example.instances.end(),
              [](const auto& a, const auto& b) { return a.start < b.start; });
    const std::string map = partition::SliceMap(m, example);
    json instances = json::array();
    for (const auto& inst : example.instances) {
      instances.push_back({{"profile", inst.profile}, {"start", inst.start}});
    }
    out.push_back({{"profiles", g.profiles}, {"example", instances}, {"slice_map", map}});
    rows.push_back({std::to_string(i + 1), MultisetText(g.profiles), map});
  }
  if (o.json) {
    std::cout << json{{"gpu", m.name},
                      {"kind", "mig"},
                      {"media_extension_profiles_included", false},
                      {"geometries", out}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << m.name << ": " << geometries.size()
              << " maximal geometries (+me profiles left out)\n\n";
    PrintTable(rows);
  }
  ctx.exit_code = kExitOk;
}

}  // namespace

void RegisterPartitionCommands(CLI::App& app, CommandContext& ctx) {
  CLI::App* part = CommandFamily(app, "partition", "Plan hardware partitions on one GPU");
  auto opts = std::make_shared<Options>();

  CLI::App* plan = part->add_subcommand(
      "plan", "Find a legal layout for wanted MIG profiles, or an AMD mode pair");
  plan->add_option("--gpu", opts->gpu, "GPU model or alias (case-insensitive)")->required();
  plan->add_option("--want", opts->want,
                   "MIG: profiles, e.g. 3g.40gb,1g.10gb. AMD: sizes, e.g. 24GiB,40GiB, or "
                   "a pair, e.g. CPX+NPS4")
      ->required();
  plan->add_option("--existing", opts->existing,
                   "MIG: instances already on the GPU, e.g. 1g.5gb@4,2g.10gb@0");
  plan->add_flag("--json", opts->json, "Print JSON");
  plan->callback([opts, &ctx] {
    Result<const GpuModel*> m = Catalog::BuiltIn().Lookup(opts->gpu);
    if (!m.ok()) return Fail(ctx, Status::InvalidArgument(m.status().message()));
    Result<std::vector<std::string>> items = SplitList(opts->want, "--want");
    if (!items.ok()) return Fail(ctx, items.status());
    if ((*m)->is_mig()) {
      PlanMig(**m, *items, *opts, ctx);
    } else if (!opts->existing.empty()) {
      Fail(ctx, Status::InvalidArgument("--existing applies to MIG GPUs only; " + (*m)->name +
                                        " is an AMD GPU"));
    } else {
      PlanAmd(**m, *items, *opts, ctx);
    }
  });

  CLI::App* geometries = part->add_subcommand(
      "geometries", "List the distinct maximal layouts of a MIG GPU (AMD: its legal pairs)");
  geometries->add_option("--gpu", opts->gpu, "GPU model or alias (case-insensitive)")->required();
  geometries->add_flag("--json", opts->json, "Print JSON");
  geometries->callback([opts, &ctx] {
    Result<const GpuModel*> m = Catalog::BuiltIn().Lookup(opts->gpu);
    if (!m.ok()) return Fail(ctx, Status::InvalidArgument(m.status().message()));
    Geometries(**m, *opts, ctx);
  });
}

}  // namespace tessera::cli
