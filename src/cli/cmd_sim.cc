#include "cli/commands.h"

namespace tessera::cli {

void RegisterSimCommands(CLI::App& app, CommandContext& ctx) {
  (void)app;
  (void)ctx;
}

}  // namespace tessera::cli
