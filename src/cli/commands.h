// Registration of the `tessera` subcommands. Each family lives in its own file and sets
// `ctx.exit_code` from its callback: 0 success, 1 a well-formed request that cannot be met
// (e.g. no legal layout), 2 bad input (unknown model, malformed list, unreadable file).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace tessera::cli {

struct CommandContext {
  int exit_code = 0;
};

inline constexpr int kExitOk = 0;
inline constexpr int kExitUnsatisfiable = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitDeposed = 3;  // tessera serve: another server took the lead

// The subcommand `name` of `app` that gathers a family of commands (`tessera sim ...`): the one
// already registered, or a new one that requires one of its own subcommands.
inline CLI::App* CommandFamily(CLI::App& app, const std::string& name, const std::string& help) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == name) return sub;
  }
  CLI::App* family = app.add_subcommand(name, help);
  family->require_subcommand(1);
  return family;
}

void RegisterCatalogCommands(CLI::App& app, CommandContext& ctx);
void RegisterPartitionCommands(CLI::App& app, CommandContext& ctx);
void RegisterSimCommands(CLI::App& app, CommandContext& ctx);
void RegisterBenchCommands(CLI::App& app, CommandContext& ctx);
void RegisterEngineCommands(CLI::App& app, CommandContext& ctx);
void RegisterUserCommands(CLI::App& app, CommandContext& ctx);     // cmd_client.cc
void RegisterHistoryCommands(CLI::App& app, CommandContext& ctx);  // cmd_usage.cc: usage, whatif

}  // namespace tessera::cli
