#!/usr/bin/env bash
# Dependencies point one way (README.md "What is here"). Every header lives under
# the one src/ root, so include directories alone cannot forbid an arrow: this script does. It
# reads every `#include "MODULE/..."` under src/ and every tessera_* library a src/ CMakeLists.txt
# links, and fails naming the file, the line and the forbidden arrow. Inside the control plane,
# it holds the executors and the cycle to their ports (rule 3 below).
#
#   tools/checks/layering.sh [repo-root]
#
# The table: what each module may use (besides itself). Anything not listed is forbidden.
#   common                      nothing: Status/Result, the log
#   model                       common
#   partition                   the GPU catalog and layout engines, on the model
#   sched                       the placement core (never its own quota cycle)
#   sched/quota                 the one scheduling cycle, on the placement core
#   policy                      the YAML loader of sched/quota's model
#   verify                      the promises checker, from outside the scheduler (see below)
#   sim                         the simulator: drives sched and sched/quota, loads policy, runs verify
#   store                       the durable log and records, on the model
#   net                         HTTP only
#   auth                        OpenID Connect tokens checked (JWT, JWK, the provider), on HTTP
#   backends                    Slurm, PBS, Kubernetes: run what they are given, know no engine
#   agent                       the node agent: the model, partitions, the cap library, HTTP
#   capgpu                      the cap library stands alone
#   api                         the control plane: a durable shell around sched/quota (not sim)
#   cli                         on top of all
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}

declare -A allowed=(
  [common]=""
  [model]="common"
  [partition]="common model"
  [sched]="common model partition"
  [sched/quota]="common model partition sched"
  [policy]="common model partition sched sched/quota"
  [verify]="common model partition sched/quota"
  [sim]="common model partition sched sched/quota policy verify"
  [store]="common model"
  [net]="common"
  [backends]="common model net"
  [agent]="common model partition net capgpu"
  [capgpu]=""
  [auth]="common net"
  [api]="common model partition sched sched/quota policy store backends net auth"
  [cli]="common model partition sched sched/quota policy verify sim store net backends agent api capgpu auth"
)
# Library targets (src/*/CMakeLists.txt) and the module each one is.
declare -A target_module=(
  [tessera_common]=common [tessera_model]=model [tessera_partition]=partition
  [tessera_sched]=sched [tessera_quota]=sched/quota [tessera_policy]=policy
  [tessera_verify]=verify [tessera_sim]=sim [tessera_scenario]=sim [tessera_store]=store
  [tessera_net]=net [tessera_auth]=auth [tessera_backends]=backends [tessera_agent]=agent [tessera_api]=api [tessera_api_parts]=api
  [tessera_capgpu_abi]=capgpu [tessera_capgpu_core]=capgpu [tessera_capgpu]=capgpu
  [tessera-capgpu-region]=capgpu [tessera]=cli
)

# The module a path under src/ belongs to ("sched/quota/engine.h" -> sched/quota), in $mod.
module_of() {
  case "$1" in
    sched/quota/*) mod=sched/quota ;;
    *) mod=${1%%/*} ;;
  esac
}
may_use() {  # FROM TO
  [ "$1" = "$2" ] && return 0
  local m
  for m in ${allowed[$1]-}; do [ "$m" = "$2" ] && return 0; done
  return 1
}

bad=0
fail() {  # FILE:LINE MESSAGE
  echo "$1: $2" >&2
  bad=1
}

cd "$root"
[ -d src ] || { echo "layering: no src/ under $root" >&2; exit 2; }

# Every top-level directory of src/ is a module of the table.
for d in src/*/; do
  m=$(basename "$d")
  [ -n "${allowed[$m]+x}" ] || fail "$d" "module '$m' is not in the layering table (tools/checks/layering.sh)"
done

# 1. Includes: `#include "X/..."` from module M needs M -> X in the table.
while read -r file line inc; do
  [[ "$inc" == */* ]] || continue  # a file next to it ("fuzz_util.h"), not a module
  module_of "${file#src/}"
  from=$mod
  module_of "$inc"
  to=$mod
  [ -n "${allowed[$to]+x}" ] || continue  # not a module of src/ (a system or generated header)
  if ! may_use "$from" "$to"; then
    fail "$file:$line" "forbidden arrow $from -> $to (#include \"$inc\")"
  fi
done < <(find src \( -name '*.h' -o -name '*.cc' -o -name '*.in' \) -print0 | sort -z |
  xargs -0 awk 'match($0, /^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*"/) {
    inc = substr($0, RSTART, RLENGTH); sub(/^[^"]*"/, "", inc); sub(/"$/, "", inc)
    print FILENAME, FNR, inc }')

# 2. The checker's only window on the scheduler: the quota engine's public headers.
while IFS= read -r hit; do
  fail "${hit%%:#*}" "forbidden arrow verify -> sched/quota internals (only sched/quota/engine.h and policy_model.h): ${hit#*:*:}"
done < <(grep -rnE '#include "sched/' src/verify | grep -vE '"sched/quota/(engine|policy_model)\.h"' || true)

# 3. Inside the control plane, the executors and the cycle reach the engine only through their
#    ports (api/ledger_port.h): never the engine itself, and never the store, which only the
#    ledger writes (its commit pipeline) and the views read (api/read_model.h).
ports_only="agent_executor.h agent_gateway.cc agent_reports.cc node_liveness.cc backend_executor.h
  backend_executor.cc backend_lane.h cycle_driver.h cycle_driver.cc ledger_port.h ledger_port.cc"
for f in $ports_only; do
  [ -f "src/api/$f" ] || { fail "src/api/$f" "listed in the ports-only rule but missing"; continue; }
  while IFS= read -r hit; do
    fail "src/api/$f:${hit%%:*}" "forbidden arrow executor -> engine or store (only through a port): ${hit#*:}"
  done < <(grep -nE '#[[:space:]]*include[[:space:]]*"(api/engine\.h|store/)|store::Store\b|(^|[^[:alnum:]_:])Engine[&*]|api::Engine\b' "src/api/$f" || true)
done

# ... and their library (tessera_api_parts) links no store: only the ledger's (tessera_api) does.
if tr '\n' ' ' <src/api/CMakeLists.txt | grep -qE 'target_link_libraries\(tessera_api_parts[^)]*tessera_store'; then
  fail "src/api/CMakeLists.txt" "forbidden arrow tessera_api_parts -> tessera_store (only the ledger's library links the store)"
fi

# 4. Links: every tessera_* library a module's target links is a module it may use.
for cm in $(find src -name CMakeLists.txt | sort); do
  # One record per target_link_libraries(...) call: "LINE TARGET ARG...".
  while read -r line owner args; do
    from=${target_module[$owner]-}
    if [ -z "$from" ]; then
      fail "$cm:$line" "target '$owner' is not in the layering table (tools/checks/layering.sh)"
      continue
    fi
    for a in $args; do
      to=${target_module[$a]-}
      [ -n "$to" ] || continue  # not one of the project's libraries
      if ! may_use "$from" "$to"; then
        fail "$cm:$line" "forbidden arrow $from -> $to (target $owner links $a)"
      fi
    done
  done < <(awk '
    { l = $0; sub(/#.*/, "", l) }
    l ~ /target_link_libraries[[:space:]]*\(/ { start = NR; buf = ""; open = 1 }
    open { buf = buf " " l; if (l ~ /\)/) { open = 0
      sub(/.*target_link_libraries[[:space:]]*\(/, "", buf); sub(/\).*/, "", buf)
      gsub(/[[:space:]]+/, " ", buf); print start " " buf } }' "$cm")
done

if [ $bad -ne 0 ]; then
  echo "layering: forbidden arrows (the table is in tools/checks/layering.sh; README.md, \"What is here\")" >&2
  exit 1
fi
echo "layering: ok"
