// A job request for the Kubernetes backend's unit tests (kube_unit_test.cc, kube_dra_unit_test.cc):
// one job of `gpus` devices in `form`, with a command and environment that need quoting.
#pragma once

#include <string>

#include "backends/backend.h"

namespace tessera::backends::kube {

inline JobRequest Req(const std::string& form, int gpus = 1) {
  JobRequest r;
  r.id = "j-7";
  r.name = "tessera-lab-j-7";
  r.command = {"python", "train.py", "--lr", "0.1; rm -rf /"};
  r.env = {{"A", "x y"}, {"B", "$(danger)"}};
  r.form = form;
  r.gpus = gpus;
  r.cpu_milli = 4000;
  r.memory_mib = 16384;
  return r;
}

}  // namespace tessera::backends::kube
