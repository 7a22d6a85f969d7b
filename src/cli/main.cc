// `tessera`: the command-line entry point.
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/choices.h"
#include "cli/commands.h"
#include "cli/login.h"
#include "cli/scenario_commands.h"
#include "cli/table.h"

namespace {

// Whether `arg` is a number ("-2", "-0.5"): a value, never a flag.
bool IsNumber(const std::string& arg) {
  return arg.size() > 1 && arg.find_first_not_of("0123456789.", 1) == std::string::npos;
}

// An unknown flag the parse met, said by name with the closest flag of its command ("tessera
// submit: unknown flag --queu; did you mean --queue?"), or an unknown command with the closest
// one ("tessera: unknown command 'jbos'; did you mean jobs?"); false when there was none. CLI11
// checks required options before it names extras: `--queu Q` said "--queue is required".
bool SayUnknownFlag(const CLI::App& app) {
  const CLI::App* cmd = &app;
  while (!cmd->get_subcommands().empty()) cmd = cmd->get_subcommands().back();
  const auto commands =
      cmd->get_subcommands([](const CLI::App* c) { return !c->get_name().empty(); });
  std::string path;
  for (const CLI::App* c = cmd; c != nullptr; c = c->get_parent()) {
    path = c->get_name() + (path.empty() ? "" : " " + path);
  }
  for (const std::string& arg : cmd->remaining()) {
    if (arg.empty() || (arg[0] != '-' && commands.empty())) continue;
    if (arg[0] != '-') {  // a command family (tessera, tessera sim) given a word it lacks
      std::vector<std::string> names;
      for (const CLI::App* sub : commands) names.push_back(sub->get_name());
      const std::string guess = tessera::cli::Closest(arg, names);
      std::cerr << path << ": unknown command '" << arg << "'"
                << (guess.empty() ? "" : "; did you mean " + guess + "?") << " (" << path
                << " --help lists them)\n";
      return true;
    }
    if (arg.size() < 2 || arg == "--" || IsNumber(arg)) continue;
    const std::string flag = arg.substr(0, arg.find('='));
    std::vector<std::string> names;
    for (const CLI::Option* opt : cmd->get_options()) {
      if (opt->get_group().empty()) continue;  // hidden
      for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
      for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
    }
    const std::string guess = tessera::cli::Closest(flag, names);
    std::cerr << path << ": unknown flag " << flag
              << (guess.empty() ? "" : "; did you mean " + guess + "?") << " (" << path
              << " --help lists its flags)\n";
    return true;
  }
  return false;
}

}  // namespace

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
  tessera::cli::RegisterLoginCommand(app, ctx);
  tessera::cli::RegisterCompletionCommand(app, &ctx.exit_code);  // last: it lists the others
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // What is missing or left over may be an unknown flag's doing; any other error is its own.
    const bool leftover = dynamic_cast<const CLI::RequiredError*>(&e) != nullptr ||
                          dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr;
    if (leftover && SayUnknownFlag(app)) return tessera::cli::kExitBadInput;
    app.exit(e);  // prints the message and usage hint
    return tessera::cli::kExitBadInput;
  } catch (const nlohmann::json::exception& e) {
    // An answer of a shape this client does not expect (a field null or missing): said, not an
    // abort (rc 134, as `tessera groups` did on a limit left unset).
    std::cerr << "tessera: unexpected answer from the server: " << e.what() << "\n";
    return 1;
  }
  return ctx.exit_code;
}
