// `tessera`: the command-line entry point.
#include <iostream>

#include "cli/commands.h"
#include "cli/scenario_commands.h"

int main(int argc, char** argv) {
  CLI::App app{"Tessera: fractional GPU orchestration", "tessera"};
  app.require_subcommand(1);
  tessera::cli::CommandContext ctx;
  tessera::cli::RegisterCatalogCommands(app, ctx);
  tessera::cli::RegisterPartitionCommands(app, ctx);
  tessera::cli::RegisterSimCommands(app, ctx);
  tessera::cli::RegisterBenchCommands(app, ctx);
  tessera::cli::RegisterScenarioCommands(app, ctx);  // attaches to `sim` and `bench`
  tessera::cli::RegisterHistoriesCommands(app, ctx);
  tessera::cli::RegisterEngineCommands(app, ctx);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and usage hint
    return tessera::cli::kExitBadInput;
  }
  return ctx.exit_code;
}
