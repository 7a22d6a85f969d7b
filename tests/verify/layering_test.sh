#!/usr/bin/env bash
# tools/checks/layering.sh fails where it should: on a copy of src/ it passes, then with a
# forbidden include injected (the placement core reaching into the API) and with a forbidden link
# (the model linking the API's library) it exits non-zero, naming the file, the line and the
# arrow; and the checker's window on the scheduler stays the quota engine's public headers.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
script="$root/tools/checks/layering.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fresh() {
  rm -rf "$tmp/src"
  cp -r "$root/src" "$tmp/src"
}
source "$(dirname "$0")/expect_fail.sh"  # expect_fail WHAT PATTERN

fresh
bash "$script" "$tmp" >/dev/null || { echo "FAIL: layering.sh refuses the clean tree" >&2; exit 1; }
echo "ok: the clean tree passes"

# An include: the placement core reaches into the control plane (line 2 of a new file).
printf '// injected\n#include "api/engine.h"\n' >"$tmp/src/sched/injected_bad.cc"
expect_fail "include sched -> api" '^src/sched/injected_bad\.cc:2: forbidden arrow sched -> api '
expect_fail "the summary names where the rules are" \
  '^layering: forbidden arrows \(the table is in tools/checks/layering.sh; README.md, "What is here"\)$'

# The control plane reaching into the simulator (the what-if once did).
fresh
printf '#include "sim/scenario.h"\n' >>"$tmp/src/api/whatif.cc"
expect_fail "include api -> sim" '^src/api/whatif\.cc:[0-9]+: forbidden arrow api -> sim '

# The cap library stands alone.
fresh
printf '#include "common/status.h"\n' >>"$tmp/src/capgpu/sizes.cc"
expect_fail "include capgpu -> common" '^src/capgpu/sizes\.cc:[0-9]+: forbidden arrow capgpu -> common '

# The checker may not read the scheduler's fit code.
fresh
printf '#include "sched/quota/engine_impl.h"\n' >>"$tmp/src/verify/checker.cc"
expect_fail "include verify -> quota internals" '^src/verify/checker\.cc:[0-9]+: forbidden arrow verify -> sched/quota internals'

# A link: the model links the API's library.
fresh
printf 'target_link_libraries(tessera_model PRIVATE tessera_api)\n' >>"$tmp/src/model/CMakeLists.txt"
expect_fail "link model -> api" '^src/model/CMakeLists\.txt:[0-9]+: forbidden arrow model -> api \(target tessera_model links tessera_api\)'

# An executor reaching past its port: into the engine, or into the store.
fresh
printf '#include "api/engine.h"\n' >>"$tmp/src/api/backend_executor.cc"
expect_fail "executor -> engine" '^src/api/backend_executor\.cc:[0-9]+: forbidden arrow executor -> engine or store'
fresh
printf 'void Keep(store::Store& s);\n' >>"$tmp/src/api/node_liveness.cc"
expect_fail "executor -> store" '^src/api/node_liveness\.cc:[0-9]+: forbidden arrow executor -> engine or store'

# The parts' library linking the store.
fresh
printf 'target_link_libraries(tessera_api_parts PRIVATE tessera_store)\n' >>"$tmp/src/api/CMakeLists.txt"
expect_fail "parts -> store" 'forbidden arrow tessera_api_parts -> tessera_store'

# A new module must be placed in the table.
fresh
mkdir "$tmp/src/newmod"
expect_fail "a module outside the table" "module 'newmod' is not in the layering table"
echo "layering_test: ok"
