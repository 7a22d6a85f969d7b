// Registration of `tessera sim scenario` and `tessera bench cycle` (the quota engine's
// simulator and cycle benchmark).
//
// REQUIRES: RegisterSimCommands and RegisterBenchCommands ran first on `app`: these commands
// attach to the existing "sim" and "bench" subcommands.
#pragma once

#include "cli/commands.h"

namespace tessera::cli {

void RegisterScenarioCommands(CLI::App& app, CommandContext& ctx);
// `tessera sim histories` (cmd_histories.cc).
void RegisterHistoriesCommands(CLI::App& app, CommandContext& ctx);

}  // namespace tessera::cli
