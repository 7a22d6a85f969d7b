// MPS for shares in compute mode `sm-sharing` (issue 38): the agent runs one NVIDIA MPS control
// daemon per device and supervises it, and gives each client (a share's processes) its limits.
//
// The interface followed is the one NVIDIA's "Multi-Process Service" guide documents (Appendix:
// Tools and Interface Reference): `nvidia-cuda-mps-control -d` starts the control daemon in the
// background, for the devices CUDA_VISIBLE_DEVICES names, with its pipes in
// CUDA_MPS_PIPE_DIRECTORY (where it writes nvidia-cuda-mps-control.pid) and its logs in
// CUDA_MPS_LOG_DIRECTORY; `nvidia-cuda-mps-control` without -d reads commands on its standard
// input and prints the daemon's answers (`set_default_active_thread_percentage P`,
// `get_default_active_thread_percentage`, `set_default_device_pinned_mem_limit DEV VALUE`,
// `get_server_list`, `quit`). A client finds its daemon through CUDA_MPS_PIPE_DIRECTORY and takes
// its ceilings from CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (percent of the device's threads) and
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=8192M": device memory it may pin).
//
// An active-thread percentage is a ceiling, not a guarantee; the control plane keeps a device's
// sm-sharing percentages summing to at most 100 so that each is a floor too (docs/agent.md).
//
// Tested against a stand-in control program (tests/agent/fake_mps_control.cc) that speaks the
// same commands; there is no GPU here.
//
// Thread-safety: none; the agent's loop owns it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/launcher.h"
#include "common/status.h"

namespace tessera::agent {

struct MpsOptions {
  std::string control = "nvidia-cuda-mps-control";  // the control program (PATH is searched)
  std::string root;  // per device: ROOT/<index>/pipe and ROOT/<index>/log, made 0700
};

class MpsDaemons {
 public:
  explicit MpsDaemons(MpsOptions options);
  ~MpsDaemons();  // asks every daemon it started to quit
  MpsDaemons(const MpsDaemons&) = delete;
  MpsDaemons& operator=(const MpsDaemons&) = delete;

  // Device `index` (UUID `uuid`) has a running control daemon afterwards: started, or started
  // again when the one before died (supervision: call it before each use). An error names the
  // device and what failed.
  Status Ensure(int index, const std::string& uuid);
  // Whether the device's daemon runs (its pid file names a live process).
  bool Running(int index) const;
  // The daemon's pid, or 0.
  int Pid(int index) const;
  // One command through the control program; its answer without the trailing newline.
  Result<std::string> Command(int index, const std::string& line);
  // The default active-thread percentage for the device's new MPS servers (1 to 100).
  Status SetDefaultActiveThreadPercentage(int index, int percent);
  // A client's environment on device `index`: its daemon's pipe and log directories, and its
  // ceilings (percent 1 to 100; memory_mib > 0, else no memory limit is set).
  Result<std::map<std::string, std::string>> ClientEnv(int index, int percent,
                                                       long long memory_mib) const;
  // Asks the device's daemon to quit and waits for it (at most a second).
  void Quit(int index);

 private:
  std::string Dir(int index, const char* leaf) const;
  MpsOptions options_;
  std::map<int, std::string> uuids_;  // devices started
};

// The control program the agent would run: `control` itself when it names a path (has a '/'),
// else the first executable of that name in PATH; "" when there is none (the agent then offers
// no MPS: its devices say no "mps" and sm-sharing shares are not placed there).
std::string FindMpsControl(const std::string& control);

// Whether an agent with an MPS control program offers MPS on a device: an NVIDIA device (not an
// AMD model of the partition catalog) that is not MIG-partitioned (MPS on MIG is per instance,
// which this agent does not run).
bool OffersMps(const std::string& model, bool mig_enabled);

// Binds an sm-sharing share (spec->sm_percent > 0; else nothing) to its device's control daemon:
// ensures it runs (MpsDaemons::Ensure) and puts the client's variables (ClientEnv: the pipe
// directory, the percentage, the memory cap in MiB rounded down) into spec->env, over the job's
// own. `mps` null (no control program) or a share without exactly one device is an error. Every
// error names MPS and the device: the job is then not started (exit 127, the reason its output).
Status BindMpsClient(MpsDaemons* mps, JobSpec* spec);

}  // namespace tessera::agent
