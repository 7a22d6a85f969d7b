// A real single-host Slurm for the integration tests (tests/backends/slurm_up.sh, as root):
// the scripts' folder, a shell helper, and starting it under a directory with SLURM_CONF set.
#pragma once

#include <cstdlib>
#include <string>

namespace tessera::testing {

inline const std::string kSlurmScripts = TESSERA_SOURCE_DIR "/tests/backends";

inline int Sh(const std::string& cmd) { return std::system(cmd.c_str()); }

// Starts munged, slurmctld and slurmd with all state under `slurm_dir` (its log in `log`), and
// points SLURM_CONF at it. 0 on success.
inline int SlurmUp(const std::string& slurm_dir, const std::string& log) {
  const int rc = Sh("bash " + kSlurmScripts + "/slurm_up.sh " + slurm_dir + " > " + log + " 2>&1");
  if (rc == 0) ::setenv("SLURM_CONF", (slurm_dir + "/slurm.conf").c_str(), 1);
  return rc;
}

inline void SlurmDown(const std::string& slurm_dir) {
  (void)Sh("bash " + kSlurmScripts + "/slurm_down.sh " + slurm_dir);
}

}  // namespace tessera::testing
