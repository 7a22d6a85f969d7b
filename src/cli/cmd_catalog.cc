// `tessera catalog list|show`: what the embedded GPU catalog holds.
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

namespace tessera::cli {
namespace {

using nlohmann::json;
using partition::Catalog;
using partition::GpuModel;

std::string InferredWord(const GpuModel& m) {
  if (m.inferred) return "yes";
  return m.AnyInferred() ? "partly" : "no";
}

std::string ShapeSummary(const GpuModel& m) {
  if (m.is_mig()) return std::to_string(m.mig.profiles.size()) + " profiles";
  return std::to_string(m.amd.compute_modes.size()) + " compute x " +
         std::to_string(m.amd.memory_modes.size()) + " memory modes, " +
         std::to_string(m.amd.legal_pairs.size()) + " legal pairs";
}

json ModelJson(const GpuModel& m) {
  json j = {{"name", m.name},
            {"vendor", m.vendor},
            {"kind", m.is_mig() ? "mig" : "amd"},
            {"aliases", m.aliases},
            {"architecture", m.architecture},
            {"memory_mib", m.memory_mib},
            {"inferred", m.inferred},
            {"inferred_fields", m.inferred_fields}};
  if (m.is_mig()) {
    j["compute_slices"] = m.mig.compute_slices;
    j["memory_slices"] = m.mig.memory_slices;
    j["max_gpu_instances"] = m.mig.max_gpu_instances;
    j["media_extension_limit"] = m.mig.media_extension_limit;
    j["constraints"] = m.mig.constraints;
    json profiles = json::array();
    for (const partition::MigProfile& p : m.mig.profiles) {
      profiles.push_back(
          {{"name", p.name},
           {"aliases", p.aliases},
           {"nvidia_smi_profile_id",
            p.nvidia_smi_profile_id ? json(*p.nvidia_smi_profile_id) : json(nullptr)},
           {"compute_slices", p.compute_slices},
           {"memory_slices", p.memory_slices},
           {"memory_mib", p.memory_mib},
           {"max_instances", p.max_instances},
           {"starts", p.starts},
           {"media_extension", p.media_extension},
           {"inferred", p.inferred},
           {"inferred_fields", p.inferred_fields}});
    }
    j["profiles"] = profiles;
  } else {
    j["xcd_count"] = m.amd.xcd_count;
    j["cus"] = m.amd.cus;
    json memory = json::array(), compute = json::array(), pairs = json::array();
    for (const auto& mm : m.amd.memory_modes) {
      memory.push_back({{"name", mm.name},
                        {"domains", mm.domains},
                        {"memory_per_domain_mib", m.memory_mib / mm.domains}});
    }
    for (const auto& c : m.amd.compute_modes) {
      compute.push_back({{"name", c.name},
                         {"partitions", c.partitions},
                         {"xcds_per_partition", c.xcds_per_partition},
                         {"cus_per_partition", c.cus_per_partition}});
    }
    for (const partition::AmdPartitioning& p : partition::AllPartitionings(m)) {
      pairs.push_back({{"pair", p.pair.ToString()},
                       {"compute", p.pair.compute},
                       {"memory", p.pair.memory},
                       {"partitions", p.partitions},
                       {"memory_per_partition_mib", p.memory_per_partition_mib},
                       {"validated", p.validated}});
    }
    j["memory_modes"] = memory;
    j["compute_modes"] = compute;
    j["legal_pairs"] = pairs;
  }
  return j;
}

void ShowMig(const GpuModel& m) {
  const auto& mig = m.mig;
  std::cout << m.name << " (" << m.vendor << " MIG, " << m.architecture
            << "): " << FormatMiB(m.memory_mib) << ", " << mig.compute_slices << " compute slices, "
            << mig.memory_slices << " memory slices, at most " << mig.max_gpu_instances
            << " GPU instances, at most " << mig.media_extension_limit << " +me instance\n";
  if (!m.aliases.empty()) std::cout << "aliases: " << Join(m.aliases, ", ") << "\n";
  if (m.inferred) {
    std::cout << "inferred for this model: " << Join(m.inferred_fields, ", ") << "\n";
  }
  std::cout << "\n";
  std::vector<std::vector<std::string>> rows = {
      {"PROFILE", "ID", "COMPUTE", "MEM-SLICES", "MEMORY", "MAX", "STARTS", "INFERRED"}};
  for (const partition::MigProfile& p : m.mig.profiles) {
    std::string name = p.name;
    if (!p.aliases.empty()) name += " (" + Join(p.aliases, ", ") + ")";
    std::string starts;
    for (int s : p.starts) starts += (starts.empty() ? "" : ",") + std::to_string(s);
    rows.push_back({name, p.nvidia_smi_profile_id ? std::to_string(*p.nvidia_smi_profile_id) : "-",
                    std::to_string(p.compute_slices), std::to_string(p.memory_slices),
                    FormatMiB(p.memory_mib), std::to_string(p.max_instances), "{" + starts + "}",
                    p.inferred_fields.empty() ? (p.inferred ? "*" : "")
                                              : "* " + Join(p.inferred_fields, ",")});
  }
  PrintTable(rows);
  for (const std::string& c : mig.constraints) std::cout << "\nconstraint: " << c << "\n";
}

void ShowAmd(const GpuModel& m) {
  std::cout << m.name << " (" << m.vendor << " partitions, " << m.architecture
            << "): " << FormatMiB(m.memory_mib) << ", " << m.amd.xcd_count << " XCDs, " << m.amd.cus
            << " CUs\n";
  if (m.inferred) {
    std::cout << "inferred: " << Join(m.inferred_fields, "; ") << "\n";
  }
  std::cout << "\ncompute modes:\n";
  std::vector<std::vector<std::string>> compute = {{"MODE", "PARTITIONS", "XCDS", "CUS"}};
  for (const auto& c : m.amd.compute_modes) {
    compute.push_back({c.name, std::to_string(c.partitions), std::to_string(c.xcds_per_partition),
                       std::to_string(c.cus_per_partition)});
  }
  PrintTable(compute);
  std::cout << "\nmemory modes:\n";
  std::vector<std::vector<std::string>> memory = {{"MODE", "DOMAINS", "MEMORY/DOMAIN"}};
  for (const auto& mm : m.amd.memory_modes) {
    memory.push_back({mm.name, std::to_string(mm.domains), FormatMiB(m.memory_mib / mm.domains)});
  }
  PrintTable(memory);
  std::cout << "\nlegal pairs (bare metal):\n";
  std::vector<std::vector<std::string>> pairs = {
      {"PAIR", "PARTITIONS", "MEMORY/PARTITION", "AMD-VALIDATED"}};
  for (const partition::AmdPartitioning& p : partition::AllPartitionings(m)) {
    pairs.push_back({p.pair.ToString(), std::to_string(p.partitions),
                     FormatMiB(p.memory_per_partition_mib), p.validated ? "yes" : ""});
  }
  PrintTable(pairs);
}

}  // namespace

void RegisterCatalogCommands(CLI::App& app, CommandContext& ctx) {
  CLI::App* catalog = CommandFamily(app, "catalog", "GPU models and their partition rules");

  struct Options {
    bool json = false;
    std::string model;
  };
  auto opts = std::make_shared<Options>();

  CLI::App* list = catalog->add_subcommand("list", "List the catalogued GPU models");
  list->add_flag("--json", opts->json, "Print JSON");
  list->callback([opts, &ctx] {
    const Catalog& cat = Catalog::BuiltIn();
    if (opts->json) {
      json out = json::array();
      for (const GpuModel& m : cat.models()) {
        out.push_back({{"name", m.name},
                       {"vendor", m.vendor},
                       {"kind", m.is_mig() ? "mig" : "amd"},
                       {"memory_mib", m.memory_mib},
                       {"profiles", m.is_mig() ? m.mig.profiles.size() : 0},
                       {"legal_pairs", m.is_amd() ? m.amd.legal_pairs.size() : 0},
                       {"inferred", InferredWord(m)}});
      }
      std::cout << out.dump(2) << "\n";
      ctx.exit_code = kExitOk;
      return;
    }
    std::vector<std::vector<std::string>> rows = {
        {"MODEL", "VENDOR", "MEMORY", "KIND", "PROFILES/MODES", "INFERRED"}};
    for (const GpuModel& m : cat.models()) {
      rows.push_back({m.name, m.vendor, FormatMiB(m.memory_mib), m.is_mig() ? "MIG" : "AMD",
                      ShapeSummary(m), InferredWord(m)});
    }
    PrintTable(rows);
    ctx.exit_code = kExitOk;
  });

  CLI::App* show = catalog->add_subcommand("show", "Show one model's profiles or modes");
  show->add_option("model", opts->model, "Model name or alias (case-insensitive)")->required();
  show->add_flag("--json", opts->json, "Print JSON");
  show->callback([opts, &ctx] {
    Result<const GpuModel*> m = Catalog::BuiltIn().Lookup(opts->model);
    if (!m.ok()) {
      std::cerr << "tessera: " << m.status().message() << "\n";
      ctx.exit_code = kExitBadInput;
      return;
    }
    if (opts->json) {
      std::cout << ModelJson(**m).dump(2) << "\n";
    } else if ((*m)->is_mig()) {
      ShowMig(**m);
    } else {
      ShowAmd(**m);
    }
    ctx.exit_code = kExitOk;
  });
}

}  // namespace tessera::cli
