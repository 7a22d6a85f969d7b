#!/usr/bin/env bash
# Starts a real single-host Slurm (munged, slurmctld, slurmd from Debian's slurm-wlm) with all
# state under DIR, on loopback with free ports; GPUs are declared over placeholder character
# devices created in DIR. Prints nothing on success; on failure prints the daemons' logs.
# Usage: slurm_up.sh DIR   (as root). Stop with slurm_down.sh DIR.
#        With SLURM_UP_ACCOUNTING=1, where Debian's slurmdbd and mariadb-server are installed:
#        accounting through slurmdbd over a MariaDB server of its own in DIR/db, so that sacct
#        answers (without them, or without the variable, there is no accounting storage).
#        slurm_up.sh DIR restart-ctld   restarts slurmctld alone (its state is kept in DIR/state).
#        slurm_up.sh DIR stop-ctld      stops slurmctld alone (a controller outage).
set -euo pipefail
D=$1
export SLURM_CONF=$D/slurm.conf
wait_idle() {
  for _ in $(seq 1 150); do
    if sinfo -h -o '%T' 2>/dev/null | grep -Eqx 'idle|mixed|allocated'; then return 0; fi
    sleep 0.1
  done
  echo "slurm did not become ready:"; sinfo -N -l || true; tail -n 30 "$D/log/slurmctld.log" "$D/log/slurmd.log"
  return 1
}
stop_ctld() {
  [ -f "$D/run/slurmctld.pid" ] || return 0
  pid=$(cat "$D/run/slurmctld.pid")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}
case "${2:-}" in
  stop-ctld) stop_ctld; exit 0 ;;
  restart-ctld)
    stop_ctld
    slurmctld -f "$D/slurm.conf" >/dev/null 2>&1 || { cat "$D/log/slurmctld.log"; exit 1; }
    wait_idle; exit $? ;;
esac
mkdir -p "$D"/{state,spool,log,run,munge,dev}
chmod 700 "$D/munge"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
CTLD_PORT=$(free_port); SLURMD_PORT=$(free_port)
while [ "$SLURMD_PORT" = "$CTLD_PORT" ]; do SLURMD_PORT=$(free_port); done
ACCOUNTING="AccountingStorageType=accounting_storage/none"
DBD=0
if [ "${SLURM_UP_ACCOUNTING:-}" = 1 ] && command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null; then
  DBD=1; DB_PORT=$(free_port); DBD_PORT=$(free_port)
  ACCOUNTING="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$D/munge/munge.socket"
fi
HOST=$(hostname -s)
CPUS=$(nproc)
MEM=$(awk '/MemTotal/ {m = int($2 / 1024) - 512; print (m < 4000 ? m : 4000)}' /proc/meminfo)
# Placeholder GPU devices: character devices (null's major/minor) so shards accept them.
# gpu0-1 are whole cards (type testgpu); gpu2-3 stand for two MIG instances, typed with the
# names Slurm gives MIG devices (1g.10gb).
for i in 0 1 2 3; do
  [ -e "$D/dev/gpu$i" ] || mknod "$D/dev/gpu$i" c 1 3
done
mungekey -c -f -k "$D/munge/munge.key" >/dev/null 2>&1 || dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$D/munge/munge.key"
munged --key-file="$D/munge/munge.key" --socket="$D/munge/munge.socket" --pid-file="$D/run/munged.pid" \
  --log-file="$D/log/munged.log" --seed-file="$D/munge/seed" -f
cat > "$D/slurm.conf" <<CONF
ClusterName=tessera-test
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.socket
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
GresTypes=gpu,shard
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$ACCOUNTING
# Ended jobs are also recorded by the completion log (JobId, UserId, JobState, ... one line
# each), which needs no slurmdbd (sacct needs slurmdbd, and slurmdbd a MySQL/MariaDB server).
JobCompType=jobcomp/filetxt
JobCompLoc=$D/log/jobcomp.txt
MpiDefault=none
ReturnToService=2
MinJobAge=600
SchedulerParameters=sched_interval=1
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=2
InactiveLimit=0
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM Gres=gpu:testgpu:2,gpu:1g.10gb:2,shard:16 State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
cat > "$D/gres.conf" <<CONF
NodeName=$HOST Name=gpu Type=testgpu File=$D/dev/gpu[0-1]
NodeName=$HOST Name=gpu Type=1g.10gb File=$D/dev/gpu[2-3]
NodeName=$HOST Name=shard Count=16
CONF
if [ "$DBD" = 1 ]; then
  # MariaDB under DIR/db on loopback, slurmdbd over it (slurmdbd.conf beside slurm.conf), and
  # the cluster registered before slurmctld starts.
  mkdir -p "$D/db"
  mariadb-install-db --datadir="$D/db" --user=root --auth-root-authentication-method=normal \
    >"$D/log/mariadb-install.log" 2>&1 || { cat "$D/log/mariadb-install.log"; exit 1; }
  mariadbd --datadir="$D/db" --user=root --socket="$D/run/mariadb.sock" --port="$DB_PORT" \
    --bind-address=127.0.0.1 --pid-file="$D/run/mariadb.pid" --log-error="$D/log/mariadb.log" \
    >/dev/null 2>&1 </dev/null &
  for _ in $(seq 1 150); do [ -S "$D/run/mariadb.sock" ] && break; sleep 0.1; done
  mariadb -S "$D/run/mariadb.sock" -u root -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || { cat "$D/log/mariadb.log"; exit 1; }
  cat > "$D/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$D/munge/munge.socket
DbdAddr=127.0.0.1
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$D/run/slurmdbd.pid
LogFile=$D/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
CONF
  chmod 600 "$D/slurmdbd.conf"
  slurmdbd >/dev/null 2>&1 || { cat "$D/log/slurmdbd.log"; exit 1; }
  for _ in $(seq 1 150); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.1; done
  sacctmgr -i add cluster tessera-test >/dev/null || { cat "$D/log/slurmdbd.log"; exit 1; }
fi
slurmctld -f "$D/slurm.conf" -i >/dev/null 2>&1 || { cat "$D/log/slurmctld.log"; exit 1; }
slurmd -f "$D/slurm.conf" >/dev/null 2>&1 || { cat "$D/log/slurmd.log"; exit 1; }
wait_idle
