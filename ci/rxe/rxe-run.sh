#!/bin/bash
# rxe-run.sh - run a command against a real soft-RoCE (rdma_rxe) device inside a
# throw-away qemu VM booted from the stock Debian bookworm kernel.
# tmpi's own copy of shared/tools/rxe-vm/rxe-run.sh (see docs/rxe.md); differences:
# its own cache dir, a smaller package set, `apt-get update` when the package lists are
# missing (fresh CI machines), and TMPI_RXE_ENV to pass variables into the guest.
#
# usage: rxe-run.sh <payload-dir> -- <command ...>
#
#   <payload-dir> is copied into the guest as /payload (cwd of the command).
#   The command runs as root via `bash -c` (PATH: real tools, then busybox applets), stdin=/dev/null,
#   stdout+stderr are streamed back; the script exits with the command's exit code
#   (124 on timeout, 125 on VM/boot failure).
#
# In the guest: rdma_rxe is loaded, dummy0 has 10.99.0.1/24, rxe0 sits on dummy0.
# Exported to the command: RXE_DEV=rxe0 RXE_NETDEV=dummy0 RXE_IP=10.99.0.1
#   RXE_GID_INDEX=<index of the RoCEv2 IPv4 GID>  (use e.g. ibv_rc_pingpong -g $RXE_GID_INDEX)
# Available in the guest: busybox, iproute2 (ip, rdma), ibverbs-utils (ibv_*),
#   perftest (ib_read_bw, ib_write_lat, ...), rdmacm-utils (rping, ...), libibverbs,
#   librdmacm, libibumad, provider librxe. Shared libs needed by ELF files in
#   the payload are resolved with host ldd and shipped automatically.
#
# env: RXE_CACHE   (default /var/tmp/tmpi-rxe-cache)  cache for kernel + base initramfs
#      TMPI_RXE_ENV (default empty) "NAME=VALUE ..." exported to the command in the guest
#      RXE_TIMEOUT (default 300)  seconds, whole VM run (hard bound, qemu is killed)
#      RXE_MEM     (default 2048) guest MiB
#      RXE_SMP     (default 2)    guest vCPUs
#      RXE_ACCEL   (default auto) auto|kvm|tcg   (auto = probe KVM once, cached; else TCG)
#      RXE_VERBOSE (default 0)    1 = print guest console log to stderr at the end
#      RXE_SETUP   (default 1)    0 = load modules + dummy0 only, do not create rxe0
#      RXE_NO_APT  (default 0)    1 = never call apt-get install (packages must be present)
set -uo pipefail

CACHE=${RXE_CACHE:-/var/tmp/tmpi-rxe-cache}
TIMEOUT=${RXE_TIMEOUT:-300}
MEM=${RXE_MEM:-2048}
SMP=${RXE_SMP:-2}
ACCEL=${RXE_ACCEL:-auto}
VERBOSE=${RXE_VERBOSE:-0}
BASE_VERSION=tmpi-1   # bump to invalidate cached initramfs layout

HOST_PKGS="qemu-system-x86 busybox-static kmod cpio iproute2 file libibverbs1 ibverbs-providers
ibverbs-utils"
MODULES="crc32_generic rdma_rxe rdma_ucm ib_umad dummy"   # rxe needs the "crc32" shash (no modprobe in guest)

die() { echo "rxe-run: $*" >&2; exit 125; }
log() { echo "rxe-run: $*" >&2; }

usage() { sed -n '2,30p' "$0" >&2; exit 125; }

[ $# -ge 3 ] && [ "$2" = "--" ] || usage
PAYLOAD=$1; shift 2
[ -d "$PAYLOAD" ] || die "payload dir '$PAYLOAD' not found"
[ "$(id -u)" = 0 ] || die "must run as root (apt-get, dpkg -x, /dev/kvm)"

# ---------------------------------------------------------------- helpers
# copy host file $1 (following symlinks) into staging root $2 at its canonical path
stage_file() {
    local src=$1 root=$2 real dst
    real=$(readlink -f "$src") || return 1
    # keep the name we were asked for (soname), canonicalise the directory
    dst="$(readlink -f "$(dirname "$src")")/$(basename "$src")"
    [ -e "$root$dst" ] && return 0
    mkdir -p "$root$(dirname "$dst")"
    cp -L "$real" "$root$dst"
}

# print the shared libraries (absolute host paths) that ELF file $1 needs
elf_deps() {
    file -L "$1" 2>/dev/null | grep -q 'ELF.*dynamic' || return 0
    ldd "$1" 2>/dev/null | awk '
        /=> not found/ { print "NOTFOUND:" $1; next }
        /=>/ && $3 ~ /^\// { print $3; next }
        $1 ~ /^\// { print $1 }'
}

# stage ELF $1 and its whole lib closure into $2; libs already in $3 (base root) skipped
stage_elf_closure() {
    local f=$1 root=$2 base=${3:-} d canon
    for d in $(elf_deps "$f"); do
        case $d in NOTFOUND:*) log "warning: ${d#NOTFOUND:} (needed by $f) not found on host"; continue;; esac
        canon="$(readlink -f "$(dirname "$d")")/$(basename "$d")"
        [ -n "$base" ] && [ -e "$base$canon" ] && continue
        stage_file "$d" "$root"
    done
}

# ---------------------------------------------------------------- prepare (cached)
prepare() {
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"
    flock 9
    if [ -f "$CACHE/ready" ] && [ "$(cat "$CACHE/ready")" = "$BASE_VERSION" ]; then
        flock -u 9; return 0
    fi
    log "preparing kernel + initramfs in $CACHE (first use)"

    local missing="" p
    for p in $HOST_PKGS; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        [ "${RXE_NO_APT:-0}" = 1 ] && die "missing packages:$missing"
        log "apt-get install$missing"
        export DEBIAN_FRONTEND=noninteractive
        apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends $missing >&2 \
            || { apt-get -o DPkg::Lock::Timeout=600 update -q >&2 && apt-get -o DPkg::Lock::Timeout=600 install -y -q \
                    --no-install-recommends $missing >&2; } || die "apt-get install failed"
    fi

    # kernel: the image package that linux-image-amd64 currently depends on
    local kpkg kver kdir="$CACHE/kernel"
    resolve_kpkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }
    kpkg=$(resolve_kpkg)
    if [ -z "$kpkg" ] && [ "${RXE_NO_APT:-0}" != 1 ]; then
        apt-get -o DPkg::Lock::Timeout=600 update -q >&2 || true
        kpkg=$(resolve_kpkg)
    fi
    [ -n "$kpkg" ] || die "cannot resolve linux-image-amd64 (apt-get update failed?)"
    kver=${kpkg#linux-image-}
    rm -rf "$kdir" && mkdir -p "$kdir/debs"
    ( cd "$kdir/debs" && apt-get download "$kpkg" ) > "$kdir/download.log" 2>&1 \
        || { cat "$kdir/download.log" >&2; die "apt-get download $kpkg failed"; }
    dpkg -x "$kdir"/debs/*.deb "$kdir/root" || die "dpkg -x failed"
    /sbin/depmod -b "$kdir/root" "$kver" || die "depmod failed"
    cp "$kdir/root/boot/vmlinuz-$kver" "$CACHE/vmlinuz"
    echo "$kpkg $(dpkg-deb -f "$kdir"/debs/*.deb Version)" > "$CACHE/kernel.txt"

    local st="$CACHE/stage"
    rm -rf "$st"; mkdir -p "$st"/usr/{bin,sbin,lib,lib64} "$st"/{etc,proc,sys,dev,tmp,run,root,payload}
    ln -s usr/bin "$st/bin"; ln -s usr/sbin "$st/sbin"; ln -s usr/lib "$st/lib"; ln -s usr/lib64 "$st/lib64"

    # kernel modules, in dependency order
    mkdir -p "$st/lib/modules"
    : > "$st/etc/rxe-modules"
    local m line ko
    for m in $MODULES; do
        /sbin/modprobe -d "$kdir/root" -S "$kver" --show-depends "$m" | while read -r line; do
            ko=$(echo "$line" | awk '$1=="insmod"{print $2}')
            [ -n "$ko" ] || continue
            grep -qx "$(basename "$ko")" "$st/etc/rxe-modules" && continue
            cp "$ko" "$st/lib/modules/"
            basename "$ko" >> "$st/etc/rxe-modules"
        done
    done
    grep -q rdma_rxe.ko "$st/etc/rxe-modules" || die "rdma_rxe.ko not found in $kpkg"

    # busybox (applets only where no real tool is shipped)
    cp /bin/busybox "$st/usr/bin/busybox"

    # userspace tools
    local f
    local files="/usr/sbin/ip /usr/bin/rdma /usr/bin/bash"
    files="$files $(dpkg -L ibverbs-utils | grep -E '^/usr/s?bin/' )"
    files="$files /etc/libibverbs.d/rxe.driver"
    files="$files $(ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so)"
    # libibverbs.so.1 is dlopen()ed by tmpi (invisible to ldd): ship it explicitly
    files="$files /usr/lib/x86_64-linux-gnu/libibverbs.so.1"
    # dlopen()ed by glibc for pthread_exit/cancellation - invisible to ldd
    files="$files /usr/lib/x86_64-linux-gnu/libgcc_s.so.1"
    for f in $files; do
        [ -f "$f" ] || continue
        case $f in /etc/*) mkdir -p "$st$(dirname "$f")"; cp -L "$f" "$st$f";; *) stage_file "$f" "$st";; esac
    done
    # lib closure of every ELF in the stage (ldd already lists indirect deps)
    for f in $(find "$st/usr" -type f); do
        local hostf=${f#$st}
        [ -e "$hostf" ] && stage_elf_closure "$hostf" "$st"
    done
    # the dynamic loader
    stage_file /lib64/ld-linux-x86-64.so.2 "$st"

    for a in $(/bin/busybox --list); do
        [ -e "$st/usr/bin/$a" ] || [ -e "$st/usr/sbin/$a" ] || ln -s busybox "$st/usr/bin/$a"
    done

    printf 'root:x:0:0:root:/root:/bin/sh\n' > "$st/etc/passwd"
    printf 'root:x:0:\n' > "$st/etc/group"
    printf '127.0.0.1 localhost\n10.99.0.1 rxehost\n' > "$st/etc/hosts"
    printf 'passwd: files\ngroup: files\nhosts: files\n' > "$st/etc/nsswitch.conf"

    cat > "$st/init" <<'EOF'
#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin HOME=/root
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts; mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp; mount -t tmpfs tmpfs /run
echo 1 > /proc/sys/kernel/printk
C=/dev/ttyS0
say() { echo "RXE_INIT: $*" > $C; }
finish() { echo "RXE_EXIT=$1" > $C; sync; poweroff -f; reboot -f; }
say "boot $(cut -d' ' -f1 /proc/uptime)s"
for m in $(cat /etc/rxe-modules); do
    insmod /lib/modules/$m > $C 2>&1 || { say "insmod $m failed"; finish 125; }
done
ulimit -l unlimited
# note: busybox ash prefers its own applets (e.g. ip), so use full paths here
IP=/usr/sbin/ip
$IP link set lo up
{ $IP link show dummy0 >/dev/null 2>&1 || $IP link add dummy0 type dummy; } && $IP addr add 10.99.0.1/24 dev dummy0 && $IP link set dummy0 up \
  || { say "dummy0 setup failed"; finish 125; }
if [ -f /etc/rxe-nosetup ]; then
    say "skipping rxe setup (RXE_SETUP=0)"
else
/usr/bin/rdma link add rxe0 type rxe netdev dummy0 > $C 2>&1 || { say "rdma link add failed"; dmesg | tail -20 > $C; finish 125; }
GIDX=""
for i in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
    for try in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
        g=$(cat /sys/class/infiniband/rxe0/ports/1/gids/$i 2>/dev/null)
        t=$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i 2>/dev/null)
        case "$g" in 0000:0000:0000:0000:0000:ffff:*) [ "$t" = "RoCE v2" ] && GIDX=$i;; esac
        [ -n "$GIDX" ] && break 2
        [ $i -gt 2 ] && break   # only wait for the first indexes to show up
        sleep 0.1
    done
done
[ -n "$GIDX" ] || { say "no IPv4 RoCEv2 GID on rxe0"; cat /sys/class/infiniband/rxe0/ports/1/gids/* > $C 2>&1; finish 125; }
export RXE_DEV=rxe0 RXE_NETDEV=dummy0 RXE_IP=10.99.0.1 RXE_GID_INDEX=$GIDX
fi
say "ready $(cut -d' ' -f1 /proc/uptime)s gid_index=$GIDX"
stty -F /dev/ttyS1 raw -echo 2>/dev/null
[ -f /etc/rxe-env ] && . /etc/rxe-env
cd /payload
/usr/bin/bash -c "$(cat /etc/rxe-cmd)" < /dev/null > /dev/ttyS1 2>&1
rc=$?
say "done $(cut -d' ' -f1 /proc/uptime)s"
say "mem $(free -k | awk '/Mem:/{print "total_kB="$2" used_kB="$3}')"
finish $rc
EOF
    chmod 755 "$st/init"

    ( cd "$st" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet ) > "$CACHE/base.cpio" \
        || die "cpio failed"
    rm -rf "$kdir"    # extracted kernel package no longer needed (~400 MB)
    echo "$BASE_VERSION" > "$CACHE/ready"
    log "prepared: $(cat "$CACHE/kernel.txt"), base initramfs $(du -h "$CACHE/base.cpio" | cut -f1)"
    flock -u 9
}

# ---------------------------------------------------------------- run
prepare

RUN=$(mktemp -d "$CACHE/run.XXXXXX")
QPID=""
cleanup() {
    if [ -n "$QPID" ] && kill -0 "$QPID" 2>/dev/null; then
        kill "$QPID" 2>/dev/null; sleep 1; kill -9 "$QPID" 2>/dev/null
    fi
    [ -n "${TPID:-}" ] && kill "$TPID" 2>/dev/null
    rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

P="$RUN/p"
mkdir -p "$P/payload" "$P/etc"
cp -a "$PAYLOAD/." "$P/payload/" || die "copying payload failed"
# shell-quote the command for `sh -c`
cmd=""
for a in "$@"; do cmd="$cmd '${a//\'/\'\\\'\'}'"; done
printf '%s\n' "$cmd" > "$P/etc/rxe-cmd"
: > "$P/etc/rxe-env"
for kv in ${TMPI_RXE_ENV:-}; do
    case $kv in [A-Za-z_]*=*) printf 'export %s\n' "${kv%%=*}='${kv#*=}'" >> "$P/etc/rxe-env";;
                 *) die "TMPI_RXE_ENV: bad entry '$kv'";; esac
done
[ "${RXE_SETUP:-1}" = 0 ] && touch "$P/etc/rxe-nosetup"
# shared libs needed by ELF files in the payload but missing in the base image
while IFS= read -r -d '' f; do
    stage_elf_closure "$f" "$P" "$CACHE/stage"
done < <(find "$PAYLOAD/" -type f -print0)
( cd "$P" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet ) > "$RUN/payload.cpio" || die "payload cpio failed"
cat "$CACHE/base.cpio" "$RUN/payload.cpio" > "$RUN/initrd"

# KVM probe (cached): some hosts expose /dev/kvm but cannot run a stock kernel
# (e.g. kvm_pvm hosts: the guest hangs right after the real-mode setup code).
kvm_works() {
    if [ ! -f "$CACHE/kvm-probe" ]; then
        local r=no
        if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
            # no initrd -> "VFS: unable to mount root" panic -> panic=-1 reboots -> qemu exits 0
            # (run via sh so bash does not print "Aborted" if qemu dies on an assertion)
            sh -c 'timeout -k 2 30 qemu-system-x86_64 -accel kvm -cpu host -m 256 -nodefaults \
                -no-user-config -display none -no-reboot -kernel "$1" -serial null \
                -append "panic=-1 console=ttyS0 loglevel=1"; exit $?' sh "$CACHE/vmlinuz" \
                < /dev/null > /dev/null 2>&1 && r=yes
        fi
        echo $r > "$CACHE/kvm-probe"
        log "KVM usable for a stock kernel: $r"
    fi
    [ "$(cat "$CACHE/kvm-probe")" = yes ]
}
case $ACCEL in
    kvm)  accel=(-accel kvm -cpu host) ;;
    tcg)  accel=(-accel tcg,thread=multi -cpu max) ;;
    auto) if kvm_works; then accel=(-accel kvm -cpu host)
          else accel=(-accel tcg,thread=multi -cpu max); fi ;;
    *) die "RXE_ACCEL must be auto|kvm|tcg" ;;
esac

: > "$RUN/out.log"; : > "$RUN/console.log"
t0=$(date +%s.%N)
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 "${accel[@]}" -smp "$SMP" -m "$MEM" \
    -nodefaults -no-user-config -display none -no-reboot \
    -kernel "$CACHE/vmlinuz" -initrd "$RUN/initrd" \
    -append "console=ttyS0 quiet loglevel=1 panic=-1 rdinit=/init" \
    -serial "file:$RUN/console.log" -serial "file:$RUN/out.log" \
    < /dev/null > "$RUN/qemu.log" 2>&1 &
QPID=$!
tail -n +1 -f --pid="$QPID" "$RUN/out.log" &
TPID=$!
wait "$QPID"; qrc=$?
QPID=""
wait "$TPID" 2>/dev/null; TPID=""
t1=$(date +%s.%N)

rc=$(tr -d '\r' < "$RUN/console.log" | sed -n 's/^RXE_EXIT=\([0-9]*\).*/\1/p' | tail -1)
if [ "$VERBOSE" = 1 ] || [ -z "$rc" ]; then
    { echo "---- qemu (rc=$qrc) ----"; cat "$RUN/qemu.log"; echo "---- guest console ----"
      tr -d '\r' < "$RUN/console.log" | tail -n 60; echo "----"; } >&2
fi
log "$(tr -d '\r' < "$RUN/console.log" | grep '^RXE_INIT: ' | sed 's/^RXE_INIT: //' | tr '\n' ';') wall $(echo "$t1 - $t0" | bc 2>/dev/null || awk "BEGIN{print $t1-$t0}")s"
if [ -z "$rc" ]; then
    [ "$qrc" = 124 ] || [ "$qrc" = 137 ] && { log "timed out after ${TIMEOUT}s"; exit 124; }
    log "guest did not report an exit code (qemu rc=$qrc)"; exit 125
fi
exit "$rc"
