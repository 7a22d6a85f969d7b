// The served benchmarks' flags: "--name value" pairs from each benchmark's own list. --help (or
// -h) prints them and exits 0; a flag not in the list, or one without its value, is refused,
// named, with exit status 2: a typo ("--agent 100") or a --help once ran a benchmark of five
// minutes on its defaults. Defaults and meanings: each benchmark's opening comment and
// bench/README.md.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

namespace tessera::bench {

inline void CheckArgs(int argc, char** argv, std::initializer_list<const char*> flags) {
  std::string usage = std::string("usage: ") + argv[0];
  for (const char* f : flags) usage += std::string(" [") + f + " V]";
  usage += "\n(defaults and meanings: the comment at the top of its source, bench/README.md)\n";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(usage.c_str(), stdout);
      std::exit(0);
    }
  }
  for (int i = 1; i < argc; i += 2) {
    bool known = false;
    for (const char* f : flags) known = known || !std::strcmp(argv[i], f);
    const char* why = !known          ? "unknown flag"
                      : i + 1 >= argc ? "a value is missing after"
                                      : nullptr;
    if (why == nullptr) continue;
    std::fprintf(stderr, "%s: %s '%s'\n%s", argv[0], why, argv[i], usage.c_str());
    std::exit(2);
  }
}

}  // namespace tessera::bench
