#!/usr/bin/env bash
# Dependencies point one way (ARCHITECTURE.md): the placement core never reaches the store, the
# API, a backend or the checker; the checker (src/verify) reads the quota engine's public header,
# the policy model and the GPU catalog only, never the scheduler's fit code. Prints each include
# that breaks a rule and fails.
set -euo pipefail
root=${1:-$(dirname "$0")/../..}
bad=0
check() {  # DIR PATTERN WHY
  local hits
  hits=$(grep -rnE "#include \"($2)" "$root/src/$1" || true)
  if [ -n "$hits" ]; then echo "src/$1 must not include $3:"; echo "$hits"; bad=1; fi
}
check sched 'store/|api/|backends/|agent/|net/|verify/|sim/|cli/' "the store, the API, backends, agents, the checker or the simulator"
check partition 'sched/|store/|api/|backends/|verify/' "anything above it"
check capgpu 'sched/|store/|api/|backends/|agent/|net/|partition/|verify/' "the rest of the project (the cap library stands alone)"
check verify 'store/|api/|backends/|agent/|net/|sim/|cli/' "the control plane or the simulator"
# The checker's only window on the scheduler: the engine's public interface.
hits=$(grep -rnE '#include "sched/' "$root/src/verify" | grep -vE '"sched/quota/(engine|policy_model)\.h"' || true)
if [ -n "$hits" ]; then echo "src/verify may include only sched/quota/engine.h and policy_model.h:"; echo "$hits"; bad=1; fi
[ $bad -eq 0 ] && echo "layering: ok"
exit $bad
