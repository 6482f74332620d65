#!/bin/bash
# slurm-up.sh - single-node Slurm (slurmctld + slurmd + munged) without systemd.
# Idempotent: re-running skips what is already installed/running.
# Everything lives under $BASE; PIDs are recorded in $BASE/run/*.pid for slurm-down.sh.
set -euo pipefail
BASE=${BASE:-/tmp/tmpi-slurm}
NCPUS=${NCPUS:-8}                 # advertised CPUs (oversubscribes the real cores)
HOST=$(hostname -s)
CONF=$BASE/etc/slurm.conf
export SLURM_CONF=$CONF
T0=$(date +%s.%N)

# 1. packages -------------------------------------------------------------
need=()
for p in slurm-wlm munge; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
if [ "${WITH_MPICH:-1}" = 1 ]; then
  for p in mpich libmpich-dev gcc libc6-dev; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
fi
if [ ${#need[@]} -gt 0 ]; then
  echo ">> installing ${need[*]}"
  apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
      --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p "$BASE"/{etc,state,spool,log,run}

# 2. munge ----------------------------------------------------------------
if [ ! -s /etc/munge/munge.key ]; then
  echo ">> creating munge key"
  if command -v mungekey >/dev/null; then mungekey --create --force
  else create-munge-key -f; fi
fi
chown munge:munge /etc/munge /etc/munge/munge.key
chmod 0700 /etc/munge; chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  echo ">> munged already answering on /run/munge/munge.socket.2"
else
  echo ">> starting munged"
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
  cp /run/munge/munged.pid "$BASE/run/munged.pid"
  for i in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n | unmunge >/dev/null
fi

# 3. config ---------------------------------------------------------------
cat > "$CONF.new" <<EOF
ClusterName=single
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldPort=6817
SlurmdPort=6818
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$NCPUS Sockets=1 CoresPerSocket=$NCPUS ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
if ! cmp -s "$CONF.new" "$CONF"; then mv "$CONF.new" "$CONF"; else rm -f "$CONF.new"; fi

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# 4. daemons (daemonize themselves; -f config; PID files under $BASE/run) --
if alive "$BASE/run/slurmctld.pid"; then echo ">> slurmctld already running (pid $(cat $BASE/run/slurmctld.pid))"
else echo ">> starting slurmctld"; /usr/sbin/slurmctld -f "$CONF" -i; fi
if alive "$BASE/run/slurmd.pid"; then echo ">> slurmd already running (pid $(cat $BASE/run/slurmd.pid))"
else echo ">> starting slurmd"; /usr/sbin/slurmd -f "$CONF"; fi

# 5. wait for idle node ---------------------------------------------------
for i in $(seq 150); do
  st=$(sinfo -h -N -o %t 2>/dev/null | head -1 || true)
  case "$st" in idle|mix|alloc) break;; esac
  sleep 0.2
done
sinfo
case "$st" in idle|mix|alloc) ;; *) echo "node not idle (state '$st'); see $BASE/log" >&2; exit 1;; esac
awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf ">> slurm up in %.1fs\n", b-a}'
cat <<EOF
Use:   export SLURM_CONF=$CONF
       srun -n 4 hostname ; srun --mpi=pmi2 -n 4 ./a.out
Stop:  $(dirname "$0")/slurm-down.sh      (kills PIDs in $BASE/run/*.pid)
EOF
