#include "cli/commands.h"

namespace tessera::cli {

void RegisterPartitionCommands(CLI::App& app, CommandContext& ctx) {
  (void)app;
  (void)ctx;
}

}  // namespace tessera::cli
