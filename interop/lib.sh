# shellcheck shell=bash
# goroce interop lab: settings and functions shared by lab.sh and run.sh. Sourced, not run.
#
# The lab is two Debian guests under QEMU, each with the kernel's soft-RoCE driver (rxe0 on
# eth0), on a bridge inside the network namespace $NS. GOROCE_LAB_SUITE picks their release:
# trixie (Debian 13: kernel 6.12, rdma-core 56, perftest 25; the default) or bookworm (Debian 12:
# kernel 6.1, rdma-core 44, perftest 4.5). Each release has its own image; one lab runs at a
# time. The namespace also holds the host end, 198.18.0.1 on vhost0, where goroce runs (`ip
# netns exec $NS ...`), and IPv6 next to IPv4: 2001:db8::1/64 on vhost0, 2001:db8::1N/64 on the
# guests' eth0. Nothing is routed out of 198.18.0.0/24 or 2001:db8::/64; IPv6 is off on the
# bridge and its ports.
#
#  VM1 eth0 198.18.0.11 2001:db8::11 -- tap1 --+
#  VM2 eth0 198.18.0.12 2001:db8::12 -- tap2 --+-- br0 (no address, MTU 9000)
#  vhost0 198.18.0.1/24 2001:db8::1/64 <-veth-> vhost0-br --+
#
# Every setting below can be overridden from the environment.
set -u

IOP="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"   # this directory
# shellcheck disable=SC2034 # used by run.sh
SRC="$(cd "$IOP/.." && pwd)"                          # the goroce module root
STATE="${GOROCE_LAB_DIR:-/var/tmp/goroce-lab}"        # images, run files, goroce binary
SUITE="${GOROCE_LAB_SUITE:-trixie}"                   # the guests' Debian release: trixie | bookworm
case $SUITE in
trixie | bookworm) ;;
*) echo "error: GOROCE_LAB_SUITE must be trixie (Debian 13) or bookworm (Debian 12), not \"$SUITE\"" >&2; exit 2 ;;
esac
# GOROCE_LAB_MIRROR: Debian mirror URL for the guest image (default: the host's apt Debian entry)
IMG="$STATE/img/$SUITE"                               # rootfs.ext4, vmlinuz, initrd.img, stamp
BUILD="$STATE/build/$SUITE"                           # the debootstrap tree (kept: rebuilds, C peers)
RUN="$STATE/run"                                      # per-VM share, pid files, QMP sockets
NS="${GOROCE_LAB_NS:-goroce-lab}"                     # network namespace
BR=br0
HOSTIF=vhost0
HOSTIF_BR=vhost0-br
HOST_IP=198.18.0.1
NET_PREFIX=198.18.0
HOST_IP6=2001:db8::1
NET6_PREFIX=2001:db8:
GID4_INDEX=1                                          # the guests' rxe0 GIDs: ::ffff:198.18.0.1N
GID6_INDEX=2                                          # and 2001:db8::1N (guest/init.sh)
LINK_MTU=9000                                         # bridge, taps, veth: jumbo capable
VM_MTU="${VM_MTU:-1500}"                              # guest eth0 MTU at boot: 1500 -> rxe 1024, 9000 -> 4096
VM_CPUS="${VM_CPUS:-1}"
VM_MEM="${VM_MEM:-1024}"
VM_LIFETIME="${VM_LIFETIME:-5400}"                    # hard cap (s) on each qemu process
VM_IDLE="${VM_IDLE:-900}"                             # a guest powers off after this many idle seconds
BOOT_TIMEOUT="${BOOT_TIMEOUT:-180}"                   # qemu start to /lab/ready, per attempt
ACCEL="${ACCEL:-auto}"                                # auto | kvm | tcg
VMS="1 2"
SKIP_RC=77                                            # exit code: the lab cannot be built or booted

# Guest packages (the same names in bookworm and trixie). libibverbs1/librdmacm1 are also what a
# cgo binary built on the host links against (the libraries keep their ABI from 44 to 56).
# rdmacm-utils brings rstream, rcopy and riostream, librdmacm1 librspreload.so (rsockets under
# LD_PRELOAD); curl is the unmodified socket program run under it (busybox-static's wget, linked
# statically, cannot take a preloaded library). The last five build the C peers (interop/peers)
# against the release's own headers, in a chroot of the image's tree (build_peers).
GUEST_PKGS="linux-image-amd64 rdma-core ibverbs-providers ibverbs-utils libibverbs1 librdmacm1
  perftest rdmacm-utils infiniband-diags iproute2 tcpdump kmod busybox-static procps
  iputils-ping ethtool psmisc curl gcc make libc6-dev libibverbs-dev librdmacm-dev"
# Host commands and the Debian packages that provide them.
HOST_TOOLS="qemu-system-x86_64:qemu-system-x86 qemu-img:qemu-utils debootstrap:debootstrap
  nft:nftables modprobe:kmod depmod:kmod cpio:cpio mkfs.ext4:e2fsprogs tcpdump:tcpdump
  ip:iproute2 ss:iproute2 flock:util-linux setsid:util-linux timeout:coreutils gzip:gzip"

vm_ip() { echo "$NET_PREFIX.1$1"; }                   # 1 -> 198.18.0.11
vm_ip6() { echo "$NET6_PREFIX:1$1"; }                 # 1 -> 2001:db8::11
vm_mac() { printf '52:54:00:67:00:%02x' "$((10 + $1))"; }
vm_dir() { echo "$RUN/vm$1"; }
jobs_dir() { echo "$RUN/vm$1/share/jobs"; }

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }
die() { echo "error: $*" >&2; exit 1; }
# skip REASON: the lab cannot be built or booted here; callers must report SKIPPED, not passed.
skip() { echo "SKIPPED: $*" >&2; exit "$SKIP_RC"; }
pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------- preconditions and host tools

# need_root: the lab needs root (namespaces, taps, debootstrap).
need_root() {
    [ "$(id -u)" = 0 ] || skip "needs root (network namespace, tap devices, debootstrap)"
}

# ensure_host_tools: apt-get installs the host packages whose commands are missing.
ensure_host_tools() {
    local pair cmd pkg missing=""
    for pair in $HOST_TOOLS; do
        cmd=${pair%%:*} pkg=${pair#*:}
        command -v "$cmd" >/dev/null 2>&1 || missing="$missing $pkg"
    done
    [ -z "$missing" ] && return 0
    missing=$(echo "$missing" | tr ' ' '\n' | sort -u | tr '\n' ' ')
    command -v apt-get >/dev/null 2>&1 || skip "missing host packages:$missing (and no apt-get)"
    log "installing host packages:$missing"
    mkdir -p "$STATE"
    if ! { timeout 600 apt-get update -q && DEBIAN_FRONTEND=noninteractive timeout 900 \
            apt-get install -y -q --no-install-recommends $missing; } > "$STATE/apt-host.log" 2>&1; then
        tail -5 "$STATE/apt-host.log" >&2
        skip "could not install host packages:$missing (log: $STATE/apt-host.log)"
    fi
    for pair in $HOST_TOOLS; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || skip "${pair%%:*} still missing after apt-get install"
    done
}

# --------------------------------------------------------------------------- guest image

# The initramfs /init: load virtio and ext4 modules, mount the root, switch to goroce-lab-init.
initramfs_init() {
    cat <<'INIT'
#!/bin/busybox sh
B=/bin/busybox
$B mkdir -p /proc /sys /dev /newroot
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
$B mount -t devtmpfs devtmpfs /dev
for m in $($B cat /mod/order); do $B insmod /mod/$m 2>/dev/null; done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do $B usleep 50000; i=$((i+1)); done
$B mount -t ext4 -o rw,noatime /dev/vda /newroot || { echo "initramfs: cannot mount /dev/vda"; $B poweroff -f; }
$B umount /proc /sys
$B mount --move /dev /newroot/dev
exec $B switch_root /newroot /sbin/goroce-lab-init
INIT
}

# image_stamp: identifies what the image is built from; a change triggers a rebuild.
image_stamp() {
    { echo "$SUITE $GUEST_PKGS"; cat "$IOP/guest/goroce-lab-init"; initramfs_init; } | sha256sum | cut -c1-16
}

image_ok() {
    [ -s "$IMG/rootfs.ext4" ] && [ -s "$IMG/vmlinuz" ] && [ -s "$IMG/initrd.img" ] &&
        [ "$(cat "$IMG/stamp" 2>/dev/null)" = "$(image_stamp)" ]
}

# apt_sources SUITE: "URI RELEASE" lines for the guests' apt sources, from this host's apt
# configuration (no host name is written here): the host's entries for SUITE and its -updates and
# -security when it has them, or else its entries for its own Debian release with the release's
# name changed to SUITE (Debian serves every release from the same mirrors). GOROCE_LAB_MIRROR
# replaces them with that mirror alone. The first line is the mirror debootstrap uses.
apt_sources() {
    local s=$1 own
    if [ -n "${GOROCE_LAB_MIRROR:-}" ]; then echo "$GOROCE_LAB_MIRROR $s"; return; fi
    own=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 'Identifier: Packages' 2>/dev/null | sort -u)
    if ! awk -v s="$s" '$2 == s { f = 1 } END { exit !f }' <<< "$own"; then
        # the host's release: the one whose name, without a suffix, its apt sources list
        local h
        h=$(. /etc/os-release 2> /dev/null && echo "${VERSION_CODENAME:-}")
        [ -n "$h" ] || return 0
        own=$(awk -v h="$h" -v s="$s" '$2 == h || $2 == h"-updates" || $2 == h"-security" { sub("^" h, s, $2); print }' <<< "$own")
    fi
    awk -v s="$s" '$2 == s' <<< "$own" | head -1
    awk -v s="$s" '$2 == s"-updates" || $2 == s"-security"' <<< "$own"
}

# build_image [--force]: debootstrap $SUITE, install GUEST_PKGS, build a busybox initramfs and a
# sparse ext4 image. Does nothing when a current image exists. Skips (exit 77) when the image
# cannot be built here (no root, no tools, no mirror).
build_image() {
    [ "${1:-}" = --force ] && rm -f "$IMG/stamp"
    image_ok && return 0
    need_root
    ensure_host_tools
    mkdir -p "$IMG" "$BUILD"
    exec 8> "$BUILD.lock"
    flock -w 1800 8 || skip "timed out waiting for another image build ($BUILD.lock)"
    image_ok && { exec 8>&-; return 0; }
    local t0 root kver m ir size mirror sources
    t0=$(now)
    sources=$(apt_sources "$SUITE")
    mirror=$(head -1 <<< "$sources" | awk '{ print $1 }')
    [ -n "$mirror" ] || skip "no Debian mirror in the host's apt configuration for $SUITE (set GOROCE_LAB_MIRROR)"
    log "building the $SUITE guest image in $IMG from $mirror (log: $BUILD.log)"
    root="$BUILD/rootfs"
    (
        set -eo pipefail
        if [ ! -e "$root/.debootstrap-done" ]; then
            rm -rf "$root"
            timeout 1200 debootstrap --variant=minbase "$SUITE" "$root" "$mirror"
            touch "$root/.debootstrap-done"
        fi
        awk '{ print "deb " $1 " " $2 " main" }' <<< "$sources" > "$root/etc/apt/sources.list"
        printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
        chmod +x "$root/usr/sbin/policy-rc.d"
        chroot_mounts "$root"
        trap 'chroot_umounts "$root"' EXIT
        # INITRD=No: no initramfs-tools image; the lab builds its own small one below.
        timeout 1800 chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive LC_ALL=C INITRD=No bash -c "
            apt-get update -q && apt-get install -y -q --no-install-recommends \
              -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold $(echo $GUEST_PKGS) &&
            apt-get clean"
        chroot_umounts "$root"
        trap - EXIT
        kver=$(ls "$root/lib/modules" | sort -V | tail -1)
        dpkg-query --admindir="$root/var/lib/dpkg" -W -f '${Package} ${Version}\n' rdma-core perftest libibverbs-dev > "$IMG/versions"
        echo "guest kernel $kver"
        cp "$root/boot/vmlinuz-$kver" "$IMG/vmlinuz"
        echo "$kver" > "$IMG/kver"
        rm -f "$root"/boot/initrd.img* "$root"/initrd.img*
        # Drop module trees a headless RoCE guest never loads.
        m="$root/lib/modules/$kver/kernel"
        rm -rf "$m/drivers/gpu" "$m/drivers/media" "$m/drivers/net/wireless" "$m/sound" \
            "$m/drivers/staging" "$m/drivers/iio" "$m/drivers/bluetooth" "$m/net/bluetooth" \
            "$m/drivers/usb" "$m/drivers/hid" "$m/drivers/input" "$m/drivers/scsi" "$m/drivers/isdn" \
            "$m/drivers/net/can" "$m/drivers/mtd"
        depmod -b "$root" "$kver"
        rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/locale" "$root/var/cache/apt"/*.bin
        install -m 0755 "$IOP/guest/goroce-lab-init" "$root/sbin/goroce-lab-init"
        echo goroce-vm > "$root/etc/hostname"
        # initramfs: busybox plus the modules needed to reach ext4 on virtio-blk
        ir="$BUILD/initramfs"
        rm -rf "$ir"
        mkdir -p "$ir/bin" "$ir/mod"
        cp "$root/bin/busybox" "$ir/bin/busybox"
        for mod in virtio_pci virtio_blk crc32c_generic ext4; do
            modprobe -d "$root" -S "$kver" --show-depends "$mod"
        done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' > "$ir/mod/list"
        : > "$ir/mod/order"
        while read -r ko; do cp "$ko" "$ir/mod/"; basename "$ko" >> "$ir/mod/order"; done < "$ir/mod/list"
        rm -f "$ir/mod/list"
        initramfs_init > "$ir/init"
        chmod +x "$ir/init"
        (cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) > "$IMG/initrd.img"
        # ext4 image; the guests open it with snapshot=on, so it stays unchanged
        size=$(($(du -sm "$root" | cut -f1) + 600))
        rm -f "$IMG/rootfs.ext4.tmp"
        mkfs.ext4 -q -F -L goroce-lab -d "$root" "$IMG/rootfs.ext4.tmp" "${size}M"
        mv "$IMG/rootfs.ext4.tmp" "$IMG/rootfs.ext4"
    ) > "$BUILD.log" 2>&1
    local rc=$?
    if [ $rc != 0 ]; then
        exec 8>&-
        tail -15 "$BUILD.log" >&2
        skip "$SUITE guest image build failed (rc $rc; mirror reachable? log: $BUILD.log)"
    fi
    image_stamp > "$IMG/stamp"
    exec 8>&-
    log "$SUITE guest image built in $(elapsed "$t0") s (kernel $(cat "$IMG/kver"), $(du -sh --apparent-size "$IMG/rootfs.ext4" | cut -f1) sparse image)"
}

# chroot_mounts ROOT, chroot_umounts ROOT: the host's /proc, /sys and /dev in a chroot, and out.
chroot_mounts() {
    local d
    for d in proc sys dev dev/pts; do mountpoint -q "$1/$d" || mount --bind "/$d" "$1/$d" || return 1; done
}
chroot_umounts() {
    local d
    for d in dev/pts dev sys proc; do umount -l "$1/$d" 2> /dev/null; done
    return 0
}

# build_peers SRC OUT: builds the C peers (interop/peers, `make -C SRC OUT=...`) against the
# guests' own rdma-core headers and libraries, in a chroot of the image's tree (GUEST_PKGS has
# the compiler), and copies them to OUT. A peer may then use what the guests' rdma-core offers
# (rdma-core 56's ibv_wr_flush in trixie, say) and links against exactly what the guests run.
# The build's output goes to standard output.
build_peers() {
    local src=$1 out=$2 root="$BUILD/rootfs" rc
    build_image || return 1
    exec 8> "$BUILD.lock"
    flock -w 600 8 || { echo "timed out waiting for $BUILD.lock"; exec 8>&-; return 1; }
    rm -rf "$root/tmp/peers-src" "$root/tmp/peers-out"
    mkdir -p "$root/tmp/peers-out" "$out"
    cp -R "$src" "$root/tmp/peers-src"
    chroot_mounts "$root" || { chroot_umounts "$root"; exec 8>&-; return 1; }
    timeout 300 chroot "$root" /usr/bin/env LC_ALL=C PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        make -C /tmp/peers-src OUT=/tmp/peers-out
    rc=$?
    chroot_umounts "$root"
    [ $rc = 0 ] && cp -p "$root"/tmp/peers-out/* "$out/"
    rm -rf "$root/tmp/peers-src" "$root/tmp/peers-out"
    exec 8>&-
    return $rc
}

# ----------------------------------------------------------------------------- network

ns_exists() { ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx "$NS"; }
nsip() { ip -n "$NS" "$@"; }

# net_up: create whatever part of the namespace network is missing.
net_up() {
    ns_exists || ip netns add "$NS" || return 1
    # IPv6 only where an address lives (lo, vhost0): new links start without it, so the bridge
    # and its ports send no router solicitations or MLD reports of their own; no RA is accepted.
    ip netns exec "$NS" sysctl -qw net.ipv6.conf.default.disable_ipv6=1 net.ipv6.conf.default.accept_ra=0 \
        net.ipv6.conf.all.accept_ra=0 net.ipv6.conf.all.forwarding=0
    nsip link set lo up
    nsip link show "$BR" > /dev/null 2>&1 ||
        nsip link add "$BR" type bridge stp_state 0 forward_delay 0 mcast_snooping 0 || return 1
    nsip link show "$HOSTIF" > /dev/null 2>&1 ||
        nsip link add "$HOSTIF" type veth peer name "$HOSTIF_BR" || return 1
    local t
    for t in tap1 tap2; do
        nsip link show "$t" > /dev/null 2>&1 || nsip tuntap add dev "$t" mode tap || return 1
    done
    for t in tap1 tap2 "$HOSTIF_BR"; do
        nsip link set "$t" mtu "$LINK_MTU" master "$BR" up || return 1
    done
    for t in "$BR" tap1 tap2 "$HOSTIF_BR"; do
        ip netns exec "$NS" sysctl -qw "net.ipv6.conf.$t.disable_ipv6=1" || return 1
    done
    ip netns exec "$NS" sysctl -qw net.ipv6.conf.lo.disable_ipv6=0 "net.ipv6.conf.$HOSTIF.disable_ipv6=0" \
        "net.ipv6.conf.$HOSTIF.accept_ra=0" "net.ipv6.conf.$HOSTIF.autoconf=0" || return 1
    nsip link set "$BR" mtu "$LINK_MTU" up &&
        nsip link set "$HOSTIF" mtu "$LINK_MTU" up &&
        nsip addr replace "$HOST_IP/24" dev "$HOSTIF" &&
        nsip addr replace "$HOST_IP6/64" dev "$HOSTIF" nodad
}

net_down() {
    ns_exists || return 0
    local t
    for t in tap1 tap2; do nsip link del "$t" 2> /dev/null; done
    ip netns del "$NS"
}

# loss_on PCT[r] [TAP...]: drop PCT % of UDP/4791 to and from each TAP (default tap1), with
# nftables numgen in the bridge forward hook (the host kernel may lack sch_netem). With the r
# suffix only requests are dropped: packets whose BTH opcode (the first byte after the UDP
# header) is not ACKNOWLEDGE (0x11), so ACKs and NAKs always arrive.
# A CM DREQ (QP1, management class 7, attribute 0x0015) is never dropped. The kernel's CM sends
# it once and cancels its retries when the process destroys its rdma_cm id, which rping and
# perftest do at once; a lost DREQ then leaves the passive side waiting for ever, rxe's own
# rping server as much as goroce's (checked by dropping the DREQ alone). Every other CM
# message is retried by its sender and stays subject to loss.
loss_on() {
    local pct=${1%r} match="" t rules=""
    [ "$pct" != "$1" ] && match="@th,64,8 != 0x11 "
    shift
    [ $# -gt 0 ] || set -- tap1
    for t in "$@"; do
        rules="$rules
        iifname \"$t\" udp dport 4791 ${match}numgen random mod 100 < $pct counter drop
        oifname \"$t\" udp dport 4791 ${match}numgen random mod 100 < $pct counter drop"
    done
    ip netns exec "$NS" nft -f - <<NFT
table bridge goroce_loss
delete table bridge goroce_loss
table bridge goroce_loss {
    chain drop4791 {
        type filter hook forward priority 0; policy accept;
        udp dport 4791 @th,104,24 1 @th,232,8 7 @th,352,16 0x0015 counter accept$rules
    }
}
NFT
}

# loss_off: print the drop counters (one line per rule) and remove the loss rules.
loss_off() {
    ip netns exec "$NS" nft list table bridge goroce_loss 2> /dev/null | grep -o '[io]ifname.*counter packets [0-9]*' |
        sed 's/ udp dport 4791.*numgen random mod 100//'
    ip netns exec "$NS" nft delete table bridge goroce_loss 2> /dev/null || true
}

# ---------------------------------------------------------------------------------- VMs

accel_opts() {
    local a=$ACCEL
    if [ "$a" = auto ]; then
        a=tcg
        [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo && a=kvm
    fi
    if [ "$a" = kvm ]; then echo "-accel kvm -cpu host"; else echo "-accel tcg -cpu max"; fi
}

vm_running() { pid_alive "$(cat "$(vm_dir "$1")/qemu.pid" 2> /dev/null)"; }
vm_ready() { [ -e "$(vm_dir "$1")/share/ready" ] && vm_running "$1"; }
# lab_ready: both VMs run $SUITE and are ready, and the namespace is there.
lab_ready() {
    local n
    ns_exists || return 1
    for n in $VMS; do
        vm_ready "$n" && [ "$(cat "$(vm_dir "$n")/suite" 2> /dev/null)" = "$SUITE" ] || return 1
    done
}
# lab_current: lab_ready, and the guests run this checkout's guest/init.sh (not another
# worktree's).
lab_current() {
    local n
    lab_ready || return 1
    for n in $VMS; do cmp -s "$IOP/guest/init.sh" "$(vm_dir "$n")/share/init.sh" || return 1; done
}

# vm_start N ACCEL_OPTS: boot VM N in the namespace (returns at once); a running VM is left alone.
vm_start() {
    local n=$1 acc=$2 d
    d=$(vm_dir "$n")
    vm_running "$n" && return 0
    mkdir -p "$d/share"
    rm -rf "${d:?}/share/"* "$d/qemu.pid" "$d/wrapper.pid" "$d/console.log"
    mkdir -p "$d/share/jobs" "$d/share/bin"
    cp "$IOP/guest/init.sh" "$d/share/init.sh"
    echo "$SUITE" > "$d/suite"
    [ -d "$STATE/push/$SUITE" ] && cp -pR "$STATE/push/$SUITE/." "$d/share/bin/"
    now > "$d/start_time"
    # qemu runs inside the namespace (it opens the persistent tapN there), in its own session,
    # under a hard time limit, without the lock descriptors (7, 8) of run.sh and build_image. romfile= : no iPXE option ROM needed for -kernel boot.
    # event_idx=off avoids a lost-notification TX stall of virtio-net seen under TCG.
    ip netns exec "$NS" setsid timeout -k 10 "$VM_LIFETIME" \
        qemu-system-x86_64 -name "goroce-lab-vm$n" -machine q35 $acc -smp "$VM_CPUS" -m "$VM_MEM" \
        -kernel "$IMG/vmlinuz" -initrd "$IMG/initrd.img" \
        -append "console=ttyS0 quiet panic=1 goroce.name=vm$n goroce.ip=$(vm_ip "$n") goroce.ip6=$(vm_ip6 "$n") goroce.mtu=$VM_MTU goroce.idle=$VM_IDLE" \
        -drive "file=$IMG/rootfs.ext4,format=raw,if=virtio,snapshot=on" \
        -netdev "tap,id=n0,ifname=tap$n,script=no,downscript=no" \
        -device "virtio-net-pci,netdev=n0,mac=$(vm_mac "$n"),speed=10000,duplex=full,romfile=" \
        -virtfs "local,path=$d/share,mount_tag=goroce,security_model=none,id=lab" \
        -global virtio-net-pci.event_idx=off -global virtio-blk-pci.event_idx=off \
        -global virtio-9p-pci.event_idx=off \
        -display none -serial "file:$d/console.log" -monitor none -no-reboot \
        -qmp "unix:$d/qmp.sock,server=on,wait=off" \
        -pidfile "$d/qemu.pid" < /dev/null > "$d/qemu.log" 2>&1 7>&- 8>&- &
    echo $! > "$d/wrapper.pid"
}

# vm_wait_ready N: wait (BOOT_TIMEOUT) until VM N wrote /lab/ready; prints its boot time.
vm_wait_ready() {
    local n=$1 d i t0 t1
    d=$(vm_dir "$n")
    for i in $(seq $((BOOT_TIMEOUT * 10))); do
        [ -e "$d/share/ready" ] && break
        [ "$i" -gt 20 ] && ! pid_alive "$(cat "$d/wrapper.pid" 2> /dev/null)" && break
        sleep 0.1
    done
    if [ ! -e "$d/share/ready" ]; then
        echo "vm$n did not become ready within ${BOOT_TIMEOUT} s; see $d/console.log $d/qemu.log $d/share/guest.log" >&2
        tail -3 "$d/qemu.log" "$d/console.log" 2> /dev/null | sed 's/^/    /' >&2
        return 1
    fi
    t0=$(cat "$d/start_time")
    t1=$(stat -c %.9Y "$d/share/ready")
    printf 'vm%s %s ready %.1f s after qemu start (%s, %s)\n' "$n" "$(vm_ip "$n")" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
        "$(grep -o 'ready_uptime=[0-9.]*' "$d/share/ready")" "$(grep -o 'port_state=.*' "$d/share/ready")"
    grep -q 'port_state=.*ACTIVE' "$d/share/ready" || { echo "vm$n: rxe0 port not ACTIVE" >&2; return 1; }
}

# vm_stop N: clean poweroff, then TERM/KILL qemu and its timeout wrapper by their recorded pids.
vm_stop() {
    local d q w i
    d=$(vm_dir "$1")
    [ -d "$d" ] || return 0
    q=$(cat "$d/qemu.pid" 2> /dev/null)
    w=$(cat "$d/wrapper.pid" 2> /dev/null)
    if pid_alive "$q"; then
        touch "$d/share/poweroff"
        for i in $(seq 100); do pid_alive "$q" || break; sleep 0.1; done
        pid_alive "$q" && { kill "$q"; sleep 1; }
        pid_alive "$q" && kill -9 "$q"
    fi
    pid_alive "$w" && kill "$w"
    rm -f "$d/qemu.pid" "$d/wrapper.pid"
}

# lab_up: image, network and both VMs, ready to run jobs. Skips (exit 77) when impossible.
lab_up() {
    need_root
    [ -c /dev/net/tun ] || skip "no /dev/net/tun (needed for the VMs' tap devices)"
    ensure_host_tools
    build_image
    local acc n ok=1 t0 other
    for n in $VMS; do
        other=$(cat "$(vm_dir "$n")/suite" 2> /dev/null)
        if vm_running "$n" && [ "$other" != "$SUITE" ]; then
            log "lab: the running guests are ${other:-of another release}; stopping them to boot $SUITE"
            lab_down
            break
        fi
    done
    net_up || { net_down; skip "cannot create network namespace $NS"; }
    acc=$(accel_opts)
    t0=$(now)
    for n in $VMS; do vm_start "$n" "$acc"; done
    for n in $VMS; do vm_wait_ready "$n" || ok=0; done
    if [ $ok = 0 ] && [ "$ACCEL" = auto ] && [[ "$acc" == *kvm* ]]; then
        echo "KVM boot failed; retrying with TCG" >&2
        for n in $VMS; do vm_stop "$n"; done
        ok=1
        for n in $VMS; do vm_start "$n" "-accel tcg -cpu max"; done
        for n in $VMS; do vm_wait_ready "$n" || ok=0; done
    fi
    if [ $ok = 0 ]; then
        lab_down > /dev/null 2>&1
        skip "the lab VMs did not boot (see $RUN/vm*/console.log)"
    fi
    echo "lab up in $(elapsed "$t0") s ($acc; $SUITE, kernel $(cat "$IMG/kver"))"
}

lab_down() {
    local n
    for n in $VMS; do vm_stop "$n"; done
    net_down
}

# ----------------------------------------------------------------------------- job runner

# job_start VM TIMEOUT 'cmd': queue a job in VM and print its id (returns at once).
job_start() {
    local j id
    j=$(jobs_dir "$1")
    id="$(date +%s%N)-$$-$RANDOM"
    printf '%s\n' "$3" > "$j/$id.cmd"
    echo "$2" > "$j/$id.tmp"
    mv "$j/$id.tmp" "$j/$id.job"
    echo "$id"
}

job_done() { [ -e "$(jobs_dir "$1")/$2.rc" ]; }

# job_wait VM ID LIMIT: wait up to LIMIT s for the job's end; returns its rc, 255 if no answer.
job_wait() {
    local j end
    j=$(jobs_dir "$1")
    end=$((SECONDS + $3))
    while [ ! -e "$j/$2.rc" ]; do
        [ $SECONDS -ge $end ] && return 255
        sleep 0.1
    done
    return "$(cat "$j/$2.rc")"
}

job_out() { cat "$(jobs_dir "$1")/$2.out" 2> /dev/null; }
job_cancel() { touch "$(jobs_dir "$1")/$2.cancel"; }
job_clean() { rm -f "$(jobs_dir "$1")/$2".*; }

# vm_run VM TIMEOUT 'cmd': run a job and wait for it; prints its output, returns its rc.
vm_run() {
    local id rc
    vm_ready "$1" || { echo "vm$1 is not running" >&2; return 255; }
    id=$(job_start "$1" "$2" "$3")
    job_wait "$1" "$id" $(($2 + 20))
    rc=$?
    [ $rc = 255 ] && { job_cancel "$1" "$id"; echo "vm$1: no answer to job $id" >&2; }
    job_out "$1" "$id"
    [ $rc != 255 ] && job_clean "$1" "$id"
    return $rc
}

# set_mtu ETH_MTU: set eth0 of both VMs (rxe follows: 1500 -> path MTU 1024, 9000 -> 4096)
# and vhost0 to ETH_MTU; waits until rxe0 reports the expected active_mtu.
set_mtu() {
    local mtu=$1 want n
    want=$( [ "$mtu" -ge 4200 ] && echo 4096 || echo 1024)
    nsip link set "$HOSTIF" mtu "$mtu" || return 1
    for n in $VMS; do
        vm_run "$n" 20 "ip link set eth0 mtu $mtu || exit 1
            for i in \$(seq 50); do ibv_devinfo -d rxe0 | grep -q 'active_mtu:.*$want' && exit 0; sleep 0.1; done
            ibv_devinfo -d rxe0 | grep mtu; exit 1" > /dev/null || { echo "vm$n: cannot set MTU $mtu" >&2; return 1; }
    done
}

# push FILE...: copy files into /lab/bin of the running VMs (on their PATH), and keep them
# for VMs of the same release booted later.
push_files() {
    local f n
    mkdir -p "$STATE/push/$SUITE"
    for f in "$@"; do
        [ -f "$f" ] || { echo "no such file: $f" >&2; return 1; }
        cp -p "$f" "$STATE/push/$SUITE/"
        for n in $VMS; do
            [ -d "$(vm_dir "$n")/share/bin" ] && cp -p "$f" "$(vm_dir "$n")/share/bin/"
        done
    done
    return 0
}
