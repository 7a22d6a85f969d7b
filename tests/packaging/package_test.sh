#!/usr/bin/env bash
# Tests of the Debian package and its systemd units (CTest label "integration").
#
#   package_test.sh units BUILD_DIR SOURCE_DIR
#       `systemd-analyze verify` on packaging/systemd/*.service (ExecStart pointed at the built
#       binary, since /usr/bin/tessera need not exist here); any complaint fails, as does
#       tessera-serve.service's `systemd-analyze security` exposure rising above 2.0.
#   package_test.sh deb BUILD_DIR SOURCE_DIR VERSION
#       builds the .deb with cpack from the built tree, checks its control data and files,
#       extracts it into a scratch root (dpkg-deb -x; nothing is installed on this host), then
#       does what an administrator would after `apt install`: sets tokens as the shipped
#       tessera.yaml and agent.env say, runs ExecStartPre and ExecStart of the extracted units
#       (paths moved into the scratch root, any free port), submits a job with the extracted
#       `tessera submit`, sees it listed by `tessera jobs` and run by the agent, and stops both.
#
# Everything is written under one mktemp directory, removed at exit; the checkout and the
# build tree are only read.
set -euo pipefail
# (No `cmd | grep -q` below: grep -q may exit before cmd is done writing, and pipefail would
# turn the writer's SIGPIPE into a failure; outputs are captured and searched instead.)

MODE=${1:?usage: package_test.sh units|deb BUILD_DIR SOURCE_DIR [VERSION]}
BUILD=$(cd "${2:?build dir}" && pwd)
SRC=$(cd "${3:?source dir}" && pwd)

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
need() {
  for c in "$@"; do
    command -v "$c" >/dev/null || fail "'$c' is not installed (scripts/setup.sh installs it)"
  done
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/tessera-package-test.XXXXXX")
PIDS=()
# On failure: SIGTERM first (the agent then stops its jobs), SIGKILL what is left after 5 s.
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

# systemd-analyze verify prints its complaints (unknown keys, bad values, missing commands) and
# still exits 0 for most of them: any output at all is a failure.
verify_units() {
  local out rc=0
  out=$(systemd-analyze verify "$@" 2>&1) || rc=$?
  if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
    fail "systemd-analyze verify $* (exit $rc):"$'\n'"$out"
  fi
}

if [ "$MODE" = units ]; then
  need systemd-analyze
  [ -x "$BUILD/src/cli/tessera" ] || fail "no built tessera at $BUILD/src/cli/tessera"
  mkdir "$TMP/units"
  for u in tessera-serve tessera-agent; do
    src_unit=$SRC/packaging/systemd/$u.service
    [ -f "$src_unit" ] || fail "missing unit $src_unit"
    grep -q '^ExecStart=/usr/bin/tessera ' "$src_unit" || fail "$u.service: ExecStart does not run /usr/bin/tessera"
    sed "s#/usr/bin/tessera #$BUILD/src/cli/tessera #g" "$src_unit" >"$TMP/units/$u.service"
  done
  verify_units "$TMP/units/tessera-serve.service" "$TMP/units/tessera-agent.service"
  echo "ok: systemd-analyze verify: tessera-serve.service, tessera-agent.service"

  # The server is meant to be sandboxed tightly: its exposure score (0 best, 10 worst) must stay
  # "OK" (threshold is in tenths).
  out=$(systemd-analyze security --offline=yes --threshold=20 "$TMP/units/tessera-serve.service" 2>&1) ||
    fail "tessera-serve.service is exposed above 2.0:"$'\n'"$(grep -E '✗|Overall' <<<"$out")"
  echo "ok: $(grep -o 'Overall exposure level.*' <<<"$out")"
  exit 0
fi

[ "$MODE" = deb ] || fail "unknown mode '$MODE' (units or deb)"
VERSION=${4:?version}
need cpack dpkg-deb sha256sum od

# ---- build the package from the built tree ----
[ -f "$BUILD/CPackConfig.cmake" ] || fail "no $BUILD/CPackConfig.cmake: configure the build first"
cpack --config "$BUILD/CPackConfig.cmake" -G DEB -B "$TMP/cpack" >"$TMP/cpack.log" 2>&1 ||
  fail "cpack failed:"$'\n'"$(cat "$TMP/cpack.log")"
debs=("$TMP"/cpack/tessera_*.deb)
[ ${#debs[@]} -eq 1 ] && [ -f "${debs[0]}" ] || fail "expected one tessera_*.deb, got: $(ls "$TMP/cpack")"
DEB=${debs[0]}
ARCH=$(dpkg --print-architecture)
[ "$(basename "$DEB")" = "tessera_${VERSION}_${ARCH}.deb" ] ||
  fail "package file is $(basename "$DEB"), expected tessera_${VERSION}_${ARCH}.deb"
echo "ok: built $(basename "$DEB") ($(stat -c %s "$DEB") bytes)"

# ---- control data ----
[ "$(dpkg-deb -f "$DEB" Package)" = tessera ] || fail "Package is '$(dpkg-deb -f "$DEB" Package)'"
[ "$(dpkg-deb -f "$DEB" Version)" = "$VERSION" ] || fail "Version is '$(dpkg-deb -f "$DEB" Version)', expected $VERSION"
depends=$(dpkg-deb -f "$DEB" Depends)
for d in adduser libc6 libstdc++6 libsqlite3-0 libyaml-cpp; do
  grep -q "$d" <<<"$depends" || fail "Depends lacks $d (shlibdeps): $depends"
done
mkdir "$TMP/control"
dpkg-deb -e "$DEB" "$TMP/control"
conffiles=$(sort "$TMP/control/conffiles" 2>/dev/null || true)
[ "$conffiles" = $'/etc/tessera/agent.env\n/etc/tessera/tessera.yaml' ] ||
  fail "conffiles should list /etc/tessera/agent.env and /etc/tessera/tessera.yaml, has:"$'\n'"$conffiles"
for s in postinst prerm postrm; do
  [ -x "$TMP/control/$s" ] || fail "control archive lacks an executable $s"
  sh -n "$TMP/control/$s" || fail "$s is not valid sh"
done
# postinst, with adduser, getent and systemctl stood in for (this host's are not touched): on a
# first install it makes the system user tessera-serve.service runs as (User=tessera), homed in
# its StateDirectory.
mkdir "$TMP/stub"
printf '#!/bin/sh\nexit 2\n' >"$TMP/stub/getent"
printf '#!/bin/sh\necho "$@" >>"%s/adduser.args"\n' "$TMP" >"$TMP/stub/adduser"
printf '#!/bin/sh\nexit 0\n' >"$TMP/stub/systemctl"
chmod +x "$TMP/stub/getent" "$TMP/stub/adduser" "$TMP/stub/systemctl"
PATH=$TMP/stub:$PATH sh "$TMP/control/postinst" configure "" || fail "postinst configure failed"
args=$(cat "$TMP/adduser.args" 2>/dev/null || true)
grep -q -- '--system' <<<"$args" && grep -q -- '--home /var/lib/tessera ' <<<"$args" &&
  [ "${args##* }" = tessera ] || fail "postinst should run adduser --system ... tessera, ran: '$args'"
grep -q '^User=tessera$' "$SRC/packaging/systemd/tessera-serve.service" || fail "tessera-serve.service does not run as tessera"
echo "ok: control: Depends ($depends), conffiles, maintainer scripts"

# ---- files, extracted into a scratch root ----
ROOT=$TMP/root
dpkg-deb -x "$DEB" "$ROOT"
for f in usr/bin/tessera usr/bin/tessera-capgpu-region; do
  [ -x "$ROOT/$f" ] || fail "package lacks executable /$f"
done
for f in usr/lib/tessera/libtessera_capgpu.so etc/tessera/tessera.yaml etc/tessera/agent.env \
  usr/lib/systemd/system/tessera-serve.service usr/lib/systemd/system/tessera-agent.service \
  usr/share/doc/tessera/README.md; do
  [ -f "$ROOT/$f" ] || fail "package lacks /$f"
done
[ "$(stat -c %a "$ROOT/etc/tessera/agent.env")" = 600 ] ||
  fail "/etc/tessera/agent.env holds a token and must be mode 600, is $(stat -c %a "$ROOT/etc/tessera/agent.env")"
for u in tessera-serve tessera-agent; do
  cmp -s "$ROOT/usr/lib/systemd/system/$u.service" "$SRC/packaging/systemd/$u.service" ||
    fail "the packaged $u.service differs from packaging/systemd/$u.service"
done
"$ROOT/usr/bin/tessera-capgpu-region" create "$TMP/region" --limit 1GiB >/dev/null 2>&1 &&
  grep -q 'limit 1073741824' <<<"$("$ROOT/usr/bin/tessera-capgpu-region" show "$TMP/region" 2>&1)" ||
  fail "the packaged tessera-capgpu-region does not create and show a region"
echo "ok: files: binaries, cap library, /etc/tessera, units"

# ---- from a unit file to a command line in the scratch root ----
STATE=$TMP/state
mkdir -p "$STATE/tessera" "$STATE/tessera-agent"  # what StateDirectory= creates
# The unit's value of KEY (the first such line), e.g. unit_line tessera-serve ExecStart.
unit_line() {
  local v
  v=$(grep -m1 "^$2=" "$ROOT/usr/lib/systemd/system/$1.service" | cut -d= -f2-) || true
  [ -n "$v" ] || fail "$1.service has no $2="
  printf '%s' "$v"
}
# Installed paths -> the scratch root; the state directories -> $STATE; port 8080 -> 0 (any).
relocate() {
  sed -e "s#/usr/bin/tessera #$ROOT/usr/bin/tessera #g" \
    -e "s#/usr/lib/tessera/#$ROOT/usr/lib/tessera/#g" \
    -e "s#/etc/tessera/#$ROOT/etc/tessera/#g" \
    -e "s#/var/lib/tessera-agent#$STATE/tessera-agent#g" \
    -e "s#/var/lib/tessera\\b#$STATE/tessera#g" \
    -e "s#127\\.0\\.0\\.1:8080#127.0.0.1:0#g" \
    -e 's#\$\$#$#g' <<<"$1"
}
# Every absolute path left must be inside $TMP (or /bin/sh): nothing may reach the host's
# /etc, /usr or /var.
check_relocated() {
  local w
  for w in $1; do
    w=${w#--*=}
    case "$w" in
      /bin/sh | "$TMP"/*) ;;
      /*) fail "a path of the unit was not moved into the scratch root: $w (in: $1)" ;;
    esac
  done
}

# ---- the shipped config refuses to start: no identity has a token yet ----
serve_pre=$(relocate "$(unit_line tessera-serve ExecStartPre)")
serve_cmd=$(relocate "$(unit_line tessera-serve ExecStart)")
check_relocated "$serve_pre"
check_relocated "$serve_cmd"
grep -q -- "--check-config" <<<"$serve_pre" || fail "ExecStartPre does not check the config: $serve_pre"
rc=0
out=$(eval "$serve_pre" 2>&1) || rc=$?
[ "$rc" -ne 0 ] && grep -q token_sha256 <<<"$out" ||
  fail "the shipped tessera.yaml should be refused for want of tokens (exit $rc): $out"
echo "ok: the shipped config is refused until tokens are set: $out"

# ---- set tokens as the comments in tessera.yaml say ----
new_token() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
hash_of() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
ADMIN=$(new_token)
AGENT=$(new_token)
ALICE=$(new_token)
CONF=$ROOT/etc/tessera/tessera.yaml
sed -i -e "s/\"SET-ME: sha256 of the admin token\"/$(hash_of "$ADMIN")/" \
  -e "s/\"SET-ME: sha256 of the agents' token\"/$(hash_of "$AGENT")/" \
  -e "s/\"SET-ME: sha256 of alice's token\"/$(hash_of "$ALICE")/" "$CONF"
# alice's jobs run under her Unix account (run_as, by default "alice"); this host has none: map
# her to the unprivileged nobody, as an administrator would map her to hers.
sed -i -e "s/{name: alice, role: user,/{name: alice, role: user, run_as: nobody,/" "$CONF"
grep -q "run_as: nobody" "$CONF" || fail "could not give alice an account in tessera.yaml"
! grep -q SET-ME "$CONF" || fail "placeholders left in tessera.yaml: $(grep SET-ME "$CONF")"

out=$(eval "$serve_pre" 2>&1) || fail "ExecStartPre refused the config with tokens set: $out"
echo "ok: ExecStartPre: ${out%%$'\n'*}"

# ---- tessera-serve: the unit's ExecStart ----
eval "exec $serve_cmd" >"$TMP/serve.log" 2>&1 &  # exec: the pid is the server's own
SERVE_PID=$!
PIDS+=("$SERVE_PID")
URL=
for _ in $(seq 1 100); do
  URL=$(grep -o 'listening on http://[0-9.:]*' "$TMP/serve.log" | cut -d' ' -f3 || true)
  [ -n "$URL" ] && break
  kill -0 "$SERVE_PID" 2>/dev/null || fail "tessera serve exited:"$'\n'"$(cat "$TMP/serve.log")"
  sleep 0.1
done
[ -n "$URL" ] || fail "tessera serve did not listen within 10 s:"$'\n'"$(cat "$TMP/serve.log")"
[ -f "$STATE/tessera/tessera.db" ] || fail "the store is not in the unit's --data directory ($STATE/tessera)"
echo "ok: serve listening on $URL (state in the unit's StateDirectory, relocated)"

# ---- tessera-agent: agent.env as an administrator fills it in, then the unit's commands ----
ENVF=$ROOT/etc/tessera/agent.env
agent_pre=$(relocate "$(unit_line tessera-agent ExecStartPre)")
agent_cmd=$(relocate "$(unit_line tessera-agent ExecStart)")
check_relocated "$agent_cmd"
[ "$(unit_line tessera-agent EnvironmentFile)" = /etc/tessera/agent.env ] || fail "the agent unit does not read /etc/tessera/agent.env"
# systemd's EnvironmentFile: KEY=VALUE lines, # comments.
load_env() {
  local k v
  while IFS= read -r line; do
    case "$line" in '' | '#'*) continue ;; esac
    k=${line%%=*}
    v=${line#*=}
    export "$k=$v"
  done <"$ENVF"
}
( # the shipped agent.env has no token: the unit's ExecStartPre stops it with a message
  load_env
  rc=0
  out=$(eval "$agent_pre" 2>&1) || rc=$?
  [ "$rc" -ne 0 ] && grep -q "TESSERA_TOKEN" <<<"$out" ||
    fail "the agent should refuse to start without a token (exit $rc): $out"
  echo "ok: the shipped agent.env is refused until a token is set: $out"
)
# No GPU here and no cgroup v2 to write into from a test: a simulated card, cgroups off.
# The token in a 0600 file that agent.env names (never in the environment or on a command line).
install -m 0600 /dev/null "$TMP/agent.token"
printf '%s\n' "$AGENT" >"$TMP/agent.token"
sed -i -e "s#^TESSERA_URL=.*#TESSERA_URL=$URL#" -e "s#^TESSERA_TOKEN_FILE=.*#TESSERA_TOKEN_FILE=$TMP/agent.token#" \
  -e "s#^TESSERA_AGENT_ARGS=.*#TESSERA_AGENT_ARGS=--node pkg-test --simulate 1xH100-80GB --cgroup-root $TMP/no-cgroup#" \
  "$ENVF"
(
  load_env
  out=$(eval "$agent_pre" 2>&1) || fail "the agent's ExecStartPre refused a set token: $out"
  exec >"$TMP/agent.log" 2>&1
  eval "exec $agent_cmd"
) &
AGENT_PID=$!
PIDS+=("$AGENT_PID")

# ---- a user submits a job with the packaged command ----
T=$ROOT/usr/bin/tessera
export TESSERA_URL=$URL TESSERA_TOKEN=$ALICE
for _ in $(seq 1 100); do
  grep -q pkg-test <<<"$("$T" nodes 2>/dev/null)" && break
  kill -0 "$AGENT_PID" 2>/dev/null || fail "tessera agent exited:"$'\n'"$(cat "$TMP/agent.log")"
  sleep 0.1
done
grep -q pkg-test <<<"$("$T" nodes)" || fail "the agent did not register within 10 s:"$'\n'"$(cat "$TMP/agent.log")"

out=$("$T" submit --queue notebooks --gpu-memory 8GiB -- \
  sh -c 'echo hello from the package; echo "token=${TESSERA_TOKEN:-unset}"; echo "preload=$LD_PRELOAD"') ||
  fail "tessera submit failed: $out"
JOB=$(cut -d' ' -f1 <<<"$out")
[[ "$JOB" == j-* ]] || fail "tessera submit did not print a job id: $out"
echo "ok: submitted: $out"
grep -q "^$JOB " <<<"$("$T" jobs)" || fail "tessera jobs does not list $JOB:"$'\n'"$("$T" jobs)"
echo "ok: tessera jobs lists $JOB"

state=
for _ in $(seq 1 200); do
  state=$("$T" job "$JOB" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])') || state=unknown
  case "$state" in succeeded | failed | cancelled | lost) break ;; esac
  sleep 0.1
done
job_json=$("$T" job "$JOB" --json)
[ "$state" = succeeded ] || fail "$JOB ended '$state', expected succeeded:"$'\n'"$job_json"$'\n'"$(cat "$TMP/agent.log")"
output=$("$T" job "$JOB")
grep -q "hello from the package" <<<"$output" || fail "$JOB's output is missing:"$'\n'"$output"
grep -q "token=unset" <<<"$output" || fail "the agent's token reached the job:"$'\n'"$output"
grep -q "preload=$ROOT/usr/lib/tessera/libtessera_capgpu.so" <<<"$output" ||
  fail "the share was not given the packaged cap library:"$'\n'"$output"
echo "ok: $JOB succeeded on the agent; the share ran with the packaged cap library, without the agent's token"

# ---- stop them as systemd would (SIGTERM) ----
for p in "$AGENT_PID" "$SERVE_PID"; do
  kill -TERM "$p"
  rc=0
  for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$p" 2>/dev/null && fail "pid $p did not stop within 10 s of SIGTERM"
  wait "$p" || rc=$?
  [ "$rc" -eq 0 ] || fail "pid $p exited $rc after SIGTERM:"$'\n'"$(cat "$TMP/serve.log" "$TMP/agent.log")"
done
PIDS=()
echo "ok: agent and server stopped cleanly on SIGTERM"
