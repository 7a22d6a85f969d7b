// Helpers shared by the launcher's tests (launcher_test.cc, launcher_leftovers_test.cc): a
// launcher's options on a temporary directory, and a shell job.
#pragma once

#include <string>

#include "agent/launcher.h"
#include "test_util.h"

namespace tessera::agent::testing {

// Options for a launcher whose work and region directories are under `dir`, off the host's
// real cgroup hierarchy.
inline LauncherOptions Opts(const TempDir& dir) {
  LauncherOptions o;
  o.work_dir = dir.path() + "/out";
  o.cgroup_root = "";  // the real hierarchy is not touched by these tests
  o.region_dir = dir.path();
  return o;
}

// A job `id` running `script` under /bin/sh.
inline JobSpec Sh(const std::string& id, const std::string& script) {
  JobSpec s;
  s.id = id;
  s.command = {"/bin/sh", "-c", script};
  return s;
}

}  // namespace tessera::agent::testing
