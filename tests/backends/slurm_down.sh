#!/usr/bin/env bash
# Stops what slurm_up.sh DIR started, by the pid files it left (never by name).
D=$1
for p in slurmd slurmctld slurmdbd mariadb munged; do
  f="$D/run/$p.pid"
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
done
exit 0
