// Enumerated flags: a flag whose value is one of a fixed list of names is checked as it is parsed,
// refused with "did you mean" and the list (cli/table.h's UnknownChoice), and its names are what
// `tessera completion` offers after it.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace tessera::cli {

// Checks `opt`'s value against `names` (`what` names the kind: "state", "form") and records the
// names for shell completion. Returns `opt`. With `list`, the value may be several names
// separated by commas (each checked).
CLI::Option* Choices(CLI::Option* opt, const std::string& what, std::vector<std::string> names,
                     bool list = false);

// The names Choices() recorded for `opt`; nullptr for a flag that takes any value.
const std::vector<std::string>* ChoicesOf(const CLI::Option* opt);

// `tessera completion bash|zsh`: the completion script, generated from the command table (`app`,
// every command registered), printed on stdout.
void RegisterCompletionCommand(CLI::App& app, int* exit_code);

}  // namespace tessera::cli
