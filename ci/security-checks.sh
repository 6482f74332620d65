#!/usr/bin/env bash
# Security checks of a tmpirun job (issue 10, "Security"), on real jobs:
#
#  1. Shared-memory segments are created exclusively and private: every
#     open of /dev/shm/* with O_CREAT also has O_EXCL and mode 0600
#     (strace of a btl-sm job; plus the mode of every segment seen while the
#     job runs).
#  2. The session directory is created with mode 0700, is owned by the user
#     and is not world-readable while the job runs.
#  3. The PMI server is reachable only through the inherited socketpair:
#     tmpirun never calls bind/listen or creates an AF_INET/AF_INET6 socket,
#     the rank's PMI_FD is an anonymous AF_UNIX socket, tmpirun holds no
#     TCP/UDP socket and no filesystem-bound Unix socket, and no PMI_PORT
#     is given to the ranks.
#  4. Nothing is left behind: after the job (normal end and a rank killed
#     by a signal) there is no session directory, no segment of the job in
#     /dev/shm, and no new world-writable entry in /tmp or /dev/shm.
#  5. btl-tcp listens only on the selected interfaces (issue 42): in a
#     btl self,tcp job with btl_tcp_if_include lo every AF_INET bind of the
#     ranks is to 127.0.0.1 (none to 0.0.0.0), and tmpirun binds nothing.
#     (Outsiders against the handshake: btl-tcp's tests/wireup_dos.rs and
#     tests/multiproc.rs.)
#  6. Nothing is left behind either (issue 42) when
#     - the job ends before every rank attached coll sm's segment (a rank
#       killed while the others wait in their first allreduce),
#     - tmpirun itself is killed with SIGKILL while its ranks are in init
#       (a btl-sm segment in /dev/shm, a peer not attached yet),
#     - tmpirun is killed with SIGKILL while its ranks exchange traffic:
#     once the ranks are gone, the session directory and every segment of
#     the job are removed (by tmpirun's clean-up guard; no later tmpirun
#     runs in between, and these jobs' session directories are in a private
#     TMPDIR that no other tmpirun sweeps).
#  7. Outsiders against btl-tcp's wire-up from another network namespace
#     and as another user (issue 42): a 3-rank self,tcp job runs in a
#     namespace of its own on a veth link; once every rank listens and
#     before any pair of ranks has connected, two outsiders running as
#     user nobody (uid 65534) -- one in a second namespace across the veth
#     link, one inside the job's namespace -- each hold 200 idle connections
#     to every rank's listener. The ranks then connect to each other for
#     the first time and must exchange their messages and an allreduce
#     (before the authenticated wire-up, outsiders holding the pending
#     handshake slots ended such a job within seconds).
#
# Usage: ci/security-checks.sh   (builds tmpirun, examples/ring and
#        fault-check in target/;
#        SECURITY_NO_BUILD=1 to use those already built)
# Needs strace (installed with apt-get when missing and possible).
# Exit status 0 when every check passed; each failure is printed as FAIL.
set -euo pipefail
cd "$(dirname "$0")/.."

fails=0
pass() { echo "  ok   $*"; }
fail() {
    echo "  FAIL $*"
    fails=$((fails + 1))
}

if ! command -v strace >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "security-checks: installing strace"
        export DEBIAN_FRONTEND=noninteractive
        apt-get -o DPkg::Lock::Timeout=600 update -qq
        apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends strace >/dev/null
    else
        echo "security-checks: strace is required" >&2
        exit 2
    fi
fi

# SECURITY_NO_BUILD=1 uses the binaries already in target/ (test-all.sh
# builds them first).
if [ -z "${SECURITY_NO_BUILD:-}" ]; then
    echo "== security: building tmpirun and the ring example"
    cargo build --quiet -p tmpi-run --bins
    cargo build --quiet -p tmpi --example ring
    cargo build --quiet -p tmpi-tests --bin fault-check
fi
TARGET=${CARGO_TARGET_DIR:-target}
TMPIRUN=$TARGET/debug/tmpirun
RING=$TARGET/debug/examples/ring
FAULT=$TARGET/debug/fault-check

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
uid=$(id -u)

# World-writable entries (not symlinks) owned by us in /tmp and /dev/shm.
world_writable() {
    find /tmp /dev/shm -mindepth 1 -maxdepth 3 -user "$uid" -perm -o+w ! -type l 2>/dev/null |
        grep -v "^$work" | sort || true
}
world_writable >"$work/ww.before"

# The rank-side probe: runs inside the job (tmpirun's children) while the
# PMI server is up, prints "probe-ok ..." or "probe-fail ...".
cat >"$work/probe.sh" <<'PROBE'
#!/usr/bin/env bash
r=${PMI_RANK:-?}
out() { echo "probe-$1 rank $r: $2"; }
echo "probe-job $TMPI_JOB_ID $TMPI_SESSION_DIR"
d=${TMPI_SESSION_DIR:-}
if [ -n "$d" ] && [ -d "$d" ] && [ ! -L "$d" ]; then
    m=$(stat -c %a "$d"); o=$(stat -c %u "$d")
    [ "$m" = 700 ] && out ok "session dir mode 0700" || out fail "session dir $d has mode $m"
    [ "$o" = "$(id -u)" ] && out ok "session dir owned by us" || out fail "session dir owner $o"
else
    out fail "no session directory (TMPI_SESSION_DIR=$d)"
fi
[ -z "${PMI_PORT:-}" ] && out ok "no PMI_PORT" || out fail "PMI_PORT=$PMI_PORT given to the rank"
link=$(readlink "/proc/self/fd/${PMI_FD:-none}" 2>/dev/null || true)
case "$link" in
socket:\[*\])
    ino=${link#socket:[}; ino=${ino%]}
    # /proc/net/unix: Num RefCount Protocol Flags Type St Inode [Path]
    line=$(awk -v i="$ino" '$7 == i' /proc/net/unix)
    if [ -z "$line" ]; then
        out fail "PMI_FD socket $ino is not an AF_UNIX socket"
    elif [ "$(echo "$line" | awk '{print NF}')" -gt 7 ]; then
        out fail "PMI_FD socket is bound to a path: $line"
    else
        out ok "PMI_FD is an anonymous AF_UNIX socket"
    fi
    ;;
*) out fail "PMI_FD=${PMI_FD:-unset} is not a socket ($link)" ;;
esac
# tmpirun: the nearest ancestor named tmpirun.
p=$PPID
while [ "$p" -gt 1 ] && [ "$(cat /proc/$p/comm 2>/dev/null)" != tmpirun ]; do
    p=$(awk '{print $4}' /proc/$p/stat 2>/dev/null || echo 1)
done
if [ "$p" -le 1 ]; then
    out fail "tmpirun not found among the ancestors"
else
    bad=0
    for f in /proc/$p/fd/*; do
        l=$(readlink "$f" 2>/dev/null || true)
        case "$l" in socket:\[*\]) ;; *) continue ;; esac
        ino=${l#socket:[}; ino=${ino%]}
        for t in tcp tcp6 udp udp6 raw raw6; do
            if awk -v i="$ino" 'NR > 1 && $10 == i {found=1} END {exit !found}' /proc/net/$t 2>/dev/null; then
                out fail "tmpirun holds an IP socket ($t inode $ino)"; bad=1
            fi
        done
        line=$(awk -v i="$ino" '$7 == i' /proc/net/unix)
        if [ -n "$line" ] && [ "$(echo "$line" | awk '{print NF}')" -gt 7 ]; then
            out fail "tmpirun holds a path-bound Unix socket: $line"; bad=1
        fi
    done
    [ $bad = 0 ] && out ok "tmpirun holds no IP or path-bound socket"
fi
# Shared-memory segments of this job visible now: private to us.
for s in /dev/shm/*"${TMPI_JOB_ID:-none}"*; do
    [ -e "$s" ] || continue
    m=$(stat -c %a "$s")
    [ "$m" = 600 ] && out ok "segment $s mode 0600" || out fail "segment $s has mode $m"
done
exec "$@"
PROBE
chmod 700 "$work/probe.sh"

check_probe_output() {
    local log=$1
    local n_ok n_fail
    n_ok=$(grep -c '^probe-ok' "$log" || true)
    n_fail=$(grep -c '^probe-fail' "$log" || true)
    grep '^probe-fail' "$log" | sed 's/^/       /' || true
    if [ "$n_fail" = 0 ] && [ "$n_ok" -gt 0 ]; then
        pass "rank-side checks ($n_ok passed)"
    else
        fail "rank-side checks: $n_fail failed, $n_ok passed"
    fi
}

# Checks the strace log of a job: segments, session directory, sockets.
check_trace() {
    local tr=$1
    local creat bad
    creat=$(grep -E 'open(at)?\(.*"/dev/shm/[^"]+".*O_CREAT' "$tr" | grep -v ' = -1 ' || true)
    if [ -z "$creat" ]; then
        fail "no shared-memory segment was created (is btl-sm in use?)"
    else
        # (strace splits a call interrupted by another thread's into
        # "... <unfinished ...>" and "<... resumed>": the flags and mode are
        # on the first part.)
        bad=$(echo "$creat" | grep -v -E 'O_EXCL[^,]*, 0600(\)| <unfinished)' || true)
        if [ -z "$bad" ]; then
            pass "$(echo "$creat" | wc -l) segment(s) created with O_CREAT|O_EXCL and mode 0600"
        else
            fail "segments created without O_EXCL or mode 0600:"
            echo "$bad" | sed 's/^/       /'
        fi
    fi
    local mk
    mk=$(grep -E 'mkdir(at)?\(.*tmpi-session-' "$tr" | grep -v ' = -1 ' || true)
    if [ -n "$mk" ] && ! echo "$mk" | grep -v -q ', 0700) = 0'; then
        pass "session directory created with mode 0700 (mkdir, exclusive)"
    else
        fail "session directory creation: ${mk:-none seen}"
    fi
    bad=$(grep -E '(bind|listen)\(|socket\(AF_INET6?,' "$tr" || true)
    if [ -z "$bad" ]; then
        pass "no bind/listen/AF_INET socket in tmpirun or the ranks"
    else
        fail "network or bound sockets:"
        echo "$bad" | head -5 | sed 's/^/       /'
    fi
    if grep -q 'socketpair(AF_UNIX, SOCK_STREAM' "$tr"; then
        pass "PMI connections are AF_UNIX socketpairs"
    else
        fail "no AF_UNIX socketpair seen"
    fi
}

# Checks that a finished job left nothing behind.
check_leftovers() {
    local log=$1 what=$2
    local job dir
    job=$(awk '/^probe-job/ {print $2; exit}' "$log")
    dir=$(awk '/^probe-job/ {print $3; exit}' "$log")
    if [ -z "$job" ]; then
        fail "$what: no job id reported"
        return
    fi
    if [ -e "$dir" ]; then fail "$what: session directory $dir left behind"; else pass "$what: session directory removed"; fi
    if ls /dev/shm/ 2>/dev/null | grep -q -- "$job"; then
        fail "$what: segments of $job left in /dev/shm: $(ls /dev/shm | grep -- "$job" | tr '\n' ' ')"
    else
        pass "$what: no segment of the job left in /dev/shm"
    fi
    world_writable >"$work/ww.after"
    local new
    new=$(comm -13 "$work/ww.before" "$work/ww.after")
    if [ -z "$new" ]; then pass "$what: nothing world-writable added to /tmp or /dev/shm"; else
        fail "$what: new world-writable entries: $new"
    fi
}

# The jobs use btl self,sm explicitly: the socket checks are about the
# launcher and PMI; btl-tcp listens by design (its connections are
# authenticated by the job secret, see btl-tcp's own tests).
for n in 2 4; do
    echo "== security: $n-rank btl-sm job (ring) under strace"
    log=$work/job$n.log
    tr=$work/job$n.trace
    set +e
    strace -f -qq -o "$tr" -e trace=open,openat,mkdir,mkdirat,socket,socketpair,bind,listen \
        "$TMPIRUN" -n "$n" --timeout 60 --mca btl self,sm "$work/probe.sh" "$RING" 200 >"$log" 2>&1
    rc=$?
    set -e
    if [ $rc = 0 ] && grep -q 'ring:.*OK' "$log"; then pass "job ran (exit 0)"; else
        fail "job failed with status $rc"
        tail -20 "$log" | sed 's/^/       /'
    fi
    check_probe_output "$log"
    check_trace "$tr"
    check_leftovers "$log" "after a normal end"
done

echo "== security: a rank killed by SIGKILL in the middle of the job"
log=$work/kill.log
set +e
"$TMPIRUN" -n 2 --timeout 60 --mca btl self,sm bash -c \
    'echo "probe-job $TMPI_JOB_ID $TMPI_SESSION_DIR"
     if [ "$PMI_RANK" = 1 ]; then "$0" 1000000000 & sleep 2; kill -9 $!; wait $!; exit $?; fi
     exec "$0" 1000000000' \
    "$RING" >"$log" 2>&1
rc=$?
set -e
if [ $rc = 137 ]; then pass "job ended with the killed rank's status 137"; else
    fail "job with a rank killed by SIGKILL exited with status $rc"
    tail -20 "$log" | sed 's/^/       /'
fi
check_leftovers "$log" "after a killed rank"

echo "== security: btl-tcp job (self,tcp, btl_tcp_if_include lo) under strace"
log=$work/tcp.log
tr=$work/tcp.trace
set +e
strace -f -qq -o "$tr" -e trace=socket,bind,listen \
    "$TMPIRUN" -n 2 --timeout 60 --mca btl self,tcp --mca btl_tcp_if_include lo \
    "$RING" 200 >"$log" 2>&1
rc=$?
set -e
if [ $rc = 0 ] && grep -q 'ring:.*OK' "$log"; then pass "tcp job ran (exit 0)"; else
    fail "tcp job failed with status $rc"
    tail -20 "$log" | sed 's/^/       /'
fi
binds=$(grep -E 'bind\(.*AF_INET' "$tr" | grep -v ' = -1 ' || true)
if [ -z "$binds" ]; then
    fail "no AF_INET bind seen (did btl-tcp open?)"
elif echo "$binds" | grep -v -q 'inet_addr("127.0.0.1")'; then
    fail "btl-tcp bound an address other than lo's:"
    echo "$binds" | grep -v 'inet_addr("127.0.0.1")' | head -5 | sed 's/^/       /'
else
    pass "$(echo "$binds" | wc -l) listening socket(s) bound to 127.0.0.1 only (no 0.0.0.0)"
fi

# Waits until the shell condition $1 holds: at most 30 s, only so that a
# leftover fails the check instead of hanging it.
wait_for() {
    local i
    for i in $(seq 1 1500); do
        if eval "$1"; then return 0; fi
        sleep 0.02
    done
    return 1
}
job_files() { ls /dev/shm 2>/dev/null | grep -- "$1" || true; }

echo "== security: a rank killed before every rank attached coll sm's segment"
log=$work/coll.log
TMPDIR=$work "$TMPIRUN" -n 3 --timeout 60 --mca btl self,sm --mca mpi_yield_when_idle 1 \
    "$FAULT" collearly >"$log" 2>&1 &
tp=$!
if wait_for 'grep -q "^fault-check: coll rank 0 pid" "$log" 2>/dev/null'; then
    # fault-check: coll rank 0 pid P job J DIR
    read -r pid0 job dir < <(awk '/^fault-check: coll rank 0 pid/ {print $6, $8, $9; exit}' "$log")
    echo "probe-job $job $dir" >"$log.job"
    if wait_for 'ls /dev/shm | grep -q "^tmpi-coll\.$pid0\."'; then
        pass "coll sm's segment created: $(ls /dev/shm | grep "^tmpi-coll\.$pid0\." | tr '\n' ' ')"
    else
        fail "coll sm's segment of rank 0 (pid $pid0) never appeared"
    fi
    kill -9 "$pid0"
    set +e
    wait $tp
    rc=$?
    set -e
    if [ $rc = 137 ]; then pass "job ended with the killed rank's status 137"; else
        fail "job exited with status $rc"
        tail -20 "$log" | sed 's/^/       /'
    fi
    left=$(ls /dev/shm | grep "^tmpi-coll\.$pid0\." || true)
    if [ -z "$left" ]; then pass "coll sm's segment removed"; else
        fail "coll sm's segment left behind: $left"
        rm -f /dev/shm/tmpi-coll."$pid0".*
    fi
    check_leftovers "$log.job" "after a rank killed before the segment was attached"
else
    fail "collearly job did not start"
    kill -9 $tp 2>/dev/null || true
    tail -20 "$log" | sed 's/^/       /'
fi

# tmpirun killed with SIGKILL once the line matching $2 is in $log; $3 is
# the awk program printing "job dir" from it; $4 names the moment.
kill_tmpirun() {
    local tp=$1 pattern=$2 prog=$3 what=$4 job dir
    if ! wait_for "grep -q \"$pattern\" \"$log\" 2>/dev/null"; then
        fail "$what: the job did not start"
        kill -9 "$tp" 2>/dev/null || true
        tail -20 "$log" | sed 's/^/       /'
        return
    fi
    read -r job dir < <(awk "$prog" "$log")
    echo "probe-job $job $dir" >"$log.job"
    if [ -n "${5:-}" ] && ! wait_for "[ -e /dev/shm/tmpi-sm.$job.0 ]"; then
        fail "$what: rank 0's segment never appeared"
    fi
    [ -d "$dir" ] || fail "$what: no session directory $dir while the job runs"
    kill -9 "$tp"
    wait "$tp" 2>/dev/null || true
    if wait_for "[ ! -e \"$dir\" ] && [ -z \"\$(job_files $job)\" ]"; then
        pass "$what: the job's files were removed without a later tmpirun"
    else
        fail "$what: the job's files were still there 30 s after tmpirun's death"
    fi
    check_leftovers "$log.job" "$what"
    rm -rf "$dir"
    for f in $(job_files "$job"); do rm -f "/dev/shm/$f"; done
}

echo "== security: tmpirun killed with SIGKILL while its ranks are in init"
log=$work/tmpirun-init.log
# Rank 1 sleeps 60 s before init: rank 0 waits with its segment in /dev/shm.
TMPDIR=$work "$TMPIRUN" -n 2 --timeout 120 --mca btl self,sm "$FAULT" lateinit >"$log" 2>&1 &
kill_tmpirun $! "^fault-check: early rank 0 pid" \
    '/^fault-check: early rank 0 pid/ {print $8, $9; exit}' "tmpirun killed in init" segment

echo "== security: tmpirun killed with SIGKILL in the middle of the job"
log=$work/tmpirun-run.log
TMPDIR=$work "$TMPIRUN" -n 2 --timeout 120 --mca btl self,sm --mca mpi_yield_when_idle 1 \
    "$FAULT" traffic >"$log" 2>&1 &
kill_tmpirun $! "^fault-check: job " \
    '/^fault-check: job/ {print $3, $4; exit}' "tmpirun killed mid-run"

echo "== security: outsiders from another namespace and as another user flood btl-tcp's listeners"
# Names of at most 15 characters (veth), unique per run.
tag=$$
ns_job=tmpisec${tag}j
ns_out=tmpisec${tag}o
veth_job=tsj$tag
veth_out=tso$tag
netns_down() {
    ip netns del "$ns_job" 2>/dev/null || true
    ip netns del "$ns_out" 2>/dev/null || true
}
trap 'netns_down; rm -rf "$work"' EXIT
# The outsider: holds N idle connections to each address given, says how
# many it holds, then sleeps until killed.
outsider_py='
import os, select, socket, sys, time
n = int(sys.argv[1])
socks = []
for a in sys.argv[2:]:
    host, port = a.rsplit(":", 1)
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex((host, int(port)))
        socks.append(s)
# Connections the listeners queue complete at once; the rest wait in
# SYN_SENT while the listeners backlog is full (they hold it full).
deadline = time.time() + 5
waiting = list(socks)
while waiting and time.time() < deadline:
    _, w, _ = select.select([], waiting, [], 0.2)
    waiting = [s for s in waiting if s not in w]
up = sum(1 for s in socks if s not in waiting and s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0)
print("held", up, "of", len(socks), "connections, uid", os.getuid(), flush=True)
time.sleep(600)
'
if ! command -v setpriv >/dev/null 2>&1 || ! ip netns add "$ns_job" 2>/dev/null; then
    fail "cannot create a network namespace or drop privileges (setpriv) here"
else
    ip netns add "$ns_out"
    ip link add "$veth_job" type veth peer name "$veth_out"
    ip link set "$veth_job" netns "$ns_job"
    ip link set "$veth_out" netns "$ns_out"
    ip -n "$ns_job" addr add 10.213.7.1/24 dev "$veth_job"
    ip -n "$ns_out" addr add 10.213.7.2/24 dev "$veth_out"
    for ns in "$ns_job" "$ns_out"; do ip -n "$ns" link set lo up; done
    ip -n "$ns_job" link set "$veth_job" up
    ip -n "$ns_out" link set "$veth_out" up
    log=$work/flood.log
    go=$work/flood.go
    ip netns exec "$ns_job" "$TMPIRUN" -n 3 --timeout 150 --mca btl self,tcp \
        --mca btl_tcp_if_include "$veth_job" "$FAULT" flooded "$go" >"$log" 2>&1 &
    tp=$!
    if wait_for '[ "$(grep -c "^fault-check: rank .* waiting" "$log" 2>/dev/null)" = 3 ]'; then
        # The namespace is the job's alone: every listener in it is a rank's.
        listen=$(ip netns exec "$ns_job" ss -Hltn | awk '{print $4}' | sort -u)
        nl=$(echo "$listen" | grep -c . || true)
        if [ "$nl" = 3 ] && ! echo "$listen" | grep -v -q '^10\.213\.7\.1:'; then
            pass "3 ranks listen on the veth address only: $(echo $listen)"
        else
            fail "expected 3 listeners on 10.213.7.1 only, found: $(echo $listen)"
        fi
        addrs=$(echo "$listen" | sed 's/.*:/10.213.7.1:/')
        # Debian's python3 (a per-user interpreter may not be readable by nobody).
        drop=(setpriv --reuid=65534 --regid=65534 --clear-groups)
        # shellcheck disable=SC2086
        ip netns exec "$ns_out" "${drop[@]}" /usr/bin/python3 -c "$outsider_py" 200 $addrs >"$work/out-ns.log" 2>&1 &
        o1=$!
        # shellcheck disable=SC2086
        ip netns exec "$ns_job" "${drop[@]}" /usr/bin/python3 -c "$outsider_py" 200 $addrs >"$work/out-user.log" 2>&1 &
        o2=$!
        if wait_for 'grep -q "^held" "$work/out-ns.log" && grep -q "^held" "$work/out-user.log"' &&
            ! grep -q "^held 0 " "$work/out-ns.log" "$work/out-user.log"; then
            pass "outsider in namespace $ns_out: $(cat "$work/out-ns.log"); outsider in the job's namespace: $(cat "$work/out-user.log")"
        else
            fail "the outsiders did not connect: $(cat "$work/out-ns.log" "$work/out-user.log" | tr '\n' ' ')"
        fi
        touch "$go"
        set +e
        wait $tp
        rc=$?
        set -e
        kill "$o1" "$o2" 2>/dev/null || true
        wait "$o1" "$o2" 2>/dev/null || true
        ok=$(grep -c "^fault-check: rank .* exchanged with every peer" "$log" || true)
        if [ $rc = 0 ] && [ "$ok" = 3 ]; then
            pass "the flooded job's ranks wired up and exchanged messages (exit 0)"
        else
            fail "the flooded job exited with status $rc ($ok of 3 ranks exchanged)"
            tail -20 "$log" | sed 's/^/       /'
        fi
    else
        fail "the flooded job did not start"
        kill -9 $tp 2>/dev/null || true
        tail -20 "$log" | sed 's/^/       /'
    fi
    netns_down
fi

if [ "$fails" = 0 ]; then
    echo "security-checks: all passed"
else
    echo "security-checks: $fails check(s) FAILED"
    exit 1
fi
