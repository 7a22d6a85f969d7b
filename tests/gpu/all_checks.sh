#!/usr/bin/env bash
# Every check a lent NVIDIA card allows without changing its settings (issue 38), in one run of
# at most 8 minutes, ending in one line: PASS or FAIL (with what failed). Not run by CTest: it
# needs a card. Without one (no nvidia-smi, no libnvidia-ml.so.1, or no device listed) it prints
# "SKIP: <why>" and exits 77.
#
#   bash tests/gpu/all_checks.sh [BUILD_DIR]        (default build/)
#
# The checks:
#   1. swap round trip: tests/gpu/swap_roundtrip.sh with 1 GiB, one round (the cap library swaps a
#      live process's device memory out to host memory and back, every byte verified).
#   2. a real `tessera serve` and `tessera agent` on the card's own NVML (no --simulate):
#      - inventory: the agent registers every device nvidia-smi lists, by UUID;
#      - MIG layout read: each device's MIG mode as the agent read it (nvidia-smi's
#        mig.mode.current), and with MIG on, the GPU instances nvidia-smi lists are printed;
#      - isolation grade detected: "hardware" where MIG is on, else "preload" (the agent is given
#        the cap library), in GET /v1/nodes;
#      - health events read: the agent opened NVML's event set for XID events ("XID events
#        registered" in its log; "not supported" is reported, not failed) and reads the ECC
#        counters; each device's health is in GET /v1/nodes, and a device the agent finds
#        unhealthy is a failure only when nvidia-smi shows no volatile uncorrected ECC errors on
#        it either (it is then the agent that is wrong).
# A dry run of the script itself without a card, on the stand-in NVML of tests/agent and a stub
# nvidia-smi that lists its two devices (the swap check then skips: no libcuda):
#   mkdir -p /tmp/nv && ln -sf $PWD/build/tests/agent/libagent-fake-nvml.so /tmp/nv/libnvidia-ml.so.1
#   PATH=DIR_WITH_A_STUB_nvidia-smi:$PATH LD_LIBRARY_PATH=/tmp/nv FAKE_NVML_ALL_H100=1 \
#     bash tests/gpu/all_checks.sh build
# Reads the card only: never changes MIG mode, persistence, clocks, ECC or application settings,
# and resets nothing. Needs BUILD_DIR/src/cli/tessera (the build's binary) for check 2; the swap
# check builds what it needs with g++ when BUILD_DIR has no cap library.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-build}
DEADLINE=$((SECONDS + 480))
command -v nvidia-smi >/dev/null || { echo "SKIP: no nvidia-smi (no NVIDIA driver): no GPU checks run"; exit 77; }
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
[ "${NGPU:-0}" -gt 0 ] || { echo "SKIP: nvidia-smi lists no GPU: no GPU checks run"; exit 77; }
have_nvml() {
  { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q 'libnvidia-ml\.so\.1' && return
  local d
  for d in ${LD_LIBRARY_PATH//:/ } /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64; do
    [ -e "$d/libnvidia-ml.so.1" ] && return
  done
  return 1
}
have_nvml || { echo "SKIP: no libnvidia-ml.so.1: no GPU checks run"; exit 77; }

FAILED=()
fail() { echo "  FAILED: $*"; FAILED+=("$1"); }
ok() { echo "  ok: $*"; }
left() { echo $((DEADLINE - SECONDS)); }

echo "== $NGPU GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"

# ---- 1. swap round trip (the cap library) ----
echo "== 1. swap round trip with the cap library (1 GiB, 1 round)"
if [ -z "${LIBCUDA:-}" ] && ! { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } |
  grep -q 'libcuda\.so\.1 .*x86-64' && ! ls /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 \
  /usr/local/nvidia/lib64/libcuda.so.1 >/dev/null 2>&1; then
  OUT="SKIP: no libcuda.so.1 (the CUDA driver library)"
  RC=77
else
  OUT=$(timeout $(( $(left) > 240 ? 240 : $(left) )) bash tests/gpu/swap_roundtrip.sh "$BUILD_DIR" 1 1 2>&1)
  RC=$?
fi
echo "$OUT" | tail -5 | sed 's/^/  | /'
if [ $RC -eq 77 ]; then
  echo "  skipped: $(echo "$OUT" | grep -m1 SKIP)"
elif [ $RC -eq 0 ] && echo "$OUT" | tail -1 | grep -q PASS; then
  ok "swap round trip"
else
  fail swap "swap round trip (exit $RC)"
fi

# ---- 2. serve + agent on the card's NVML ----
echo "== 2. tessera serve and tessera agent on NVML: inventory, MIG layout, isolation, health"
TESSERA="$PWD/$BUILD_DIR/src/cli/tessera"
CAP="$PWD/$BUILD_DIR/src/capgpu/libtessera_capgpu.so"
if [ ! -x "$TESSERA" ]; then
  fail agent "no $TESSERA (build the tessera target first)"
else
  WORK=$(mktemp -d)
  SERVE_PID= AGENT_PID=
  trap 'for p in $AGENT_PID $SERVE_PID; do kill $p 2>/dev/null; done; sleep 0.5; rm -rf "$WORK"' EXIT
  printf 'agent-token-gpu-check\n' >"$WORK/agent.token"
  chmod 600 "$WORK/agent.token"
  cat >"$WORK/config.yaml" <<'YAML'
heartbeat_timeout: 10s
identities:
  - {name: admin, role: admin, token: admin-token-gpu-check}
  - {name: agent, role: agent, token: agent-token-gpu-check}
groups:
  - {name: g}
profiles:
  - {name: card, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}
queues:
  - {name: q, profile: card, groups: [g]}
YAML
  "$TESSERA" serve --config "$WORK/config.yaml" --data "$WORK/data" --listen 127.0.0.1:0 \
    >"$WORK/serve.log" 2>&1 &
  SERVE_PID=$!
  PORT=
  for _ in $(seq 100); do
    PORT=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$WORK/serve.log" | tail -1)
    [ -n "$PORT" ] && break
    sleep 0.1
  done
  if [ -z "$PORT" ]; then
    fail agent "tessera serve did not start: $(tail -3 "$WORK/serve.log")"
  else
    CAPFLAG=()
    [ -f "$CAP" ] && CAPFLAG=(--capgpu "$CAP")
    "$TESSERA" agent --server "http://127.0.0.1:$PORT" --token-file "$WORK/agent.token" \
      --node gpu-check --work "$WORK/agent" --cgroup-root "" "${CAPFLAG[@]}" \
      >"$WORK/agent.log" 2>&1 &
    AGENT_PID=$!
    NODES=
    for _ in $(seq 150); do
      NODES=$(curl -s -H "Authorization: Bearer admin-token-gpu-check" \
        "http://127.0.0.1:$PORT/v1/nodes" 2>/dev/null || true)
      echo "$NODES" | grep -q '"gpu-check"' && echo "$NODES" | grep -q '"health"' && break
      sleep 0.2
    done
    sed 's/^/  agent| /' "$WORK/agent.log" | grep -E 'device|registered|NVML|unhealthy' | head -20
    if ! echo "$NODES" | grep -q '"gpu-check"'; then
      fail agent "the agent did not register: $(tail -3 "$WORK/agent.log")"
    else
      # One line per device the control plane shows: index uuid mig health isolation reason.
      ROWS=$(echo "$NODES" | python3 -c '
import json, sys
for n in json.load(sys.stdin)["nodes"]:
    if n["name"] != "gpu-check": continue
    for d in n["devices"]:
        print(d["index"], d["uuid"], d.get("health", "?"), d.get("isolation", "?"),
              d.get("health_reason", "").replace(" ", "_") or "-")
')
      echo "$ROWS" | sed 's/^/  device| /'
      N=$(echo "$ROWS" | grep -c . || true)
      [ "$N" -eq "$NGPU" ] && ok "inventory: $N device(s), as nvidia-smi lists" ||
        fail inventory "the agent registered $N device(s), nvidia-smi lists $NGPU"
      while read -r INDEX UUID HEALTH ISO REASON; do
        [ -n "$INDEX" ] || continue
        nvidia-smi -L | grep -q "$UUID" || fail inventory "device $INDEX: $UUID is not in nvidia-smi -L"
        MIG=$(nvidia-smi -i "$UUID" --query-gpu=mig.mode.current --format=csv,noheader 2>/dev/null | head -1)
        AGENT_MIG=$(grep -o "device $INDEX: .* MIG \(on\|off\)" "$WORK/agent.log" | grep -o 'MIG \(on\|off\)' | head -1)
        case "$MIG" in
          Enabled) WANT_MIG="MIG on" WANT_ISO=hardware ;;
          *) WANT_MIG="MIG off"; WANT_ISO=$([ -f "$CAP" ] && echo preload || echo none) ;;
        esac
        [ "$AGENT_MIG" = "$WANT_MIG" ] && ok "device $INDEX: MIG layout read ($AGENT_MIG; nvidia-smi: ${MIG:-N/A})" ||
          fail mig "device $INDEX: the agent read '${AGENT_MIG:-nothing}', nvidia-smi says '${MIG:-N/A}'"
        if [ "$MIG" = "Enabled" ]; then
          nvidia-smi mig -i "$INDEX" -lgi 2>/dev/null | sed 's/^/  mig| /' | head -12
        fi
        [ "$ISO" = "$WANT_ISO" ] && ok "device $INDEX: isolation grade detected: $ISO" ||
          fail isolation "device $INDEX: isolation '$ISO', expected '$WANT_ISO'"
        if [ "$HEALTH" = "ok" ]; then
          ok "device $INDEX: health read: ok"
        elif [ "$HEALTH" = "unhealthy" ]; then
          DBE=$(nvidia-smi -i "$UUID" --query-gpu=ecc.errors.uncorrected.volatile.total --format=csv,noheader 2>/dev/null | head -1)
          if [ -n "$DBE" ] && [ "$DBE" != "0" ] && [ "$DBE" != "[N/A]" ]; then
            ok "device $INDEX: health read: unhealthy (${REASON//_/ }); nvidia-smi agrees: $DBE uncorrected ECC error(s)"
          else
            echo "  note: device $INDEX reported unhealthy: ${REASON//_/ } (nvidia-smi: ${DBE:-N/A} uncorrected ECC errors)"
            case "$REASON" in XID*) ok "device $INDEX: health read: an XID since the agent started" ;;
              *) fail health "device $INDEX: unhealthy ($REASON) while nvidia-smi shows no uncorrected ECC errors" ;;
            esac
          fi
        else
          fail health "device $INDEX: no health in GET /v1/nodes"
        fi
      done <<<"$ROWS"
      if grep -q 'XID events registered' "$WORK/agent.log"; then
        ok "health events: XID events registered with NVML"
      elif grep -q 'XID events not supported' "$WORK/agent.log"; then
        echo "  note: this driver supports no XID events here (ECC counters are still read)"
      else
        fail health "the agent did not read device health: $(grep -m1 'health' "$WORK/agent.log")"
      fi
    fi
  fi
fi

if [ $SECONDS -gt $((DEADLINE)) ]; then fail time "took ${SECONDS}s, more than 8 minutes"; fi
if [ ${#FAILED[@]} -eq 0 ]; then
  echo "PASS: every GPU check (${SECONDS}s)"
else
  echo "FAIL: ${FAILED[*]} (${SECONDS}s)"
  exit 1
fi
