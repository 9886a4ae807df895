#!/bin/bash
# goroce interop lab: the start-up script of each guest. goroce-lab-init (PID 1) runs it
# from the 9p share at /lab; lab.sh copies it there at every boot.
#
# It loads rdma_rxe, configures eth0 from the kernel command line (goroce.name, goroce.ip,
# goroce.ip6, goroce.mtu, goroce.idle), creates rxe0 on eth0, waits until port 1 is ACTIVE and
# its GID table holds both addresses (index 1 the IPv4-mapped one, index 2 the IPv6 one), writes
# /lab/ready (with the GID table) and then serves jobs from /lab/jobs:
#   the host writes ID.cmd (a bash script), then ID.job (one line: timeout in seconds);
#   this loop renames ID.job to ID.run and runs the script under timeout(1), writing
#   ID.pid (the timeout process), ID.out (stdout and stderr) and finally ID.rc.
#   ID.cancel from the host stops a job: TERM to timeout, which passes it on to the
#   job's whole process group (KILL 5 s later).
# The guest powers off when /lab/poweroff appears or after goroce.idle seconds without
# a running job. /lab/bin (files pushed with `lab.sh push`) is on PATH.
export PATH=/lab/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb LC_ALL=C
exec </dev/null >>/lab/guest.log 2>&1
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
NAME=vm IP='' IP6='' MTU=1500 IDLE=900
for a in $(cat /proc/cmdline); do
    case "$a" in
        goroce.name=*) NAME=${a#*=} ;;
        goroce.ip=*) IP=${a#*=} ;;
        goroce.ip6=*) IP6=${a#*=} ;;
        goroce.mtu=*) MTU=${a#*=} ;;
        goroce.idle=*) IDLE=${a#*=} ;;
    esac
done
hostname "$NAME"
echo "== $NAME boot $(date -u +%FT%TZ) uptime $(cut -d' ' -f1 /proc/uptime)"
ulimit -l unlimited
# IPv6 on eth0 only with a static address (goroce.ip6): no router solicitations, no SLAAC.
sysctl -qw net.ipv6.conf.all.accept_ra=0 net.ipv6.conf.default.accept_ra=0 net.ipv6.conf.default.autoconf=0
[ -n "$IP6" ] || sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
modprobe -a virtio_net rdma_rxe ib_uverbs rdma_ucm ib_umad sch_netem
ip link set lo up
for _ in $(seq 100); do [ -e /sys/class/net/eth0 ] && break; sleep 0.05; done
if [ -n "$IP6" ]; then
    sysctl -qw net.ipv6.conf.eth0.disable_ipv6=0 net.ipv6.conf.eth0.accept_ra=0 net.ipv6.conf.eth0.autoconf=0
else
    sysctl -qw net.ipv6.conf.eth0.disable_ipv6=1
fi
ip link set eth0 mtu "$MTU" up
# IPv4 first: rxe fills its GID table in address order after the default (link-local) GID, and
# the matrix counts on index 1 for IPv4 and 2 for IPv6.
ip addr add "$IP/24" dev eth0
rdma link add rxe0 type rxe netdev eth0
[ -n "$IP6" ] && ip addr add "$IP6/64" dev eth0 nodad
for _ in $(seq 200); do
    grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null &&
        { [ -z "$IP6" ] || [ "$(cat /sys/class/infiniband/rxe0/ports/1/gids/2 2>/dev/null)" != 0000:0000:0000:0000:0000:0000:0000:0000 ]; } && break
    sleep 0.05
done
READY_UPTIME=$(cut -d' ' -f1 /proc/uptime)
{
    echo "name=$NAME ip=$IP ip6=$IP6 mtu=$MTU kernel=$(uname -r) ready_uptime=$READY_UPTIME"
    echo "port_state=$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)"
    rdma link show
    ibv_devinfo -v -d rxe0 > /run/devinfo 2>&1
    sed -n 's/^[[:space:]]*GID\[ *\([0-9]*\)\]:[[:space:]]*\(.*\), \(RoCE v[12]\)$/gid_index=\1 gid=\2 type=\3/p' /run/devinfo
    cat /run/devinfo
} > /lab/ready.tmp 2>&1
mv /lab/ready.tmp /lab/ready
echo "== ready at uptime $READY_UPTIME"

J=/lab/jobs
mkdir -p "$J"
mkfifo /run/tick
exec 9<>/run/tick # read -t on it sleeps without a fork
last=$SECONDS
while :; do
    for f in "$J"/*.job; do
        [ -e "$f" ] || continue
        id=${f##*/}
        id=${id%.job}
        read -r tmo < "$f"
        mv "$f" "$J/$id.run" || continue
        echo "== job $id timeout=${tmo:-60} $(date -u +%T)"
        (
            cd /root || exit 1
            timeout -k 5 "${tmo:-60}" bash "$J/$id.cmd" > "$J/$id.out" 2>&1 &
            echo $! > "$J/$id.pid"
            wait $!
            echo $? > "$J/$id.rc.tmp"
            mv "$J/$id.rc.tmp" "$J/$id.rc"
        ) &
    done
    for c in "$J"/*.cancel; do
        [ -e "$c" ] || continue
        id=${c##*/}
        id=${id%.cancel}
        if [ -e "$J/$id.rc" ]; then
            rm -f "$c"
        elif [ -e "$J/$id.job" ]; then # not started yet
            mv "$J/$id.job" "$J/$id.run" && echo 125 > "$J/$id.rc"
            rm -f "$c"
        elif [ -s "$J/$id.pid" ]; then
            echo "== cancel $id $(date -u +%T)"
            kill -TERM "$(cat "$J/$id.pid")" 2>/dev/null
            rm -f "$c"
        fi
    done
    for f in "$J"/*.run; do
        [ -e "$f" ] && [ ! -e "${f%.run}.rc" ] && last=$SECONDS
    done
    [ -e /lab/poweroff ] && break
    [ $((SECONDS - last)) -ge "$IDLE" ] && { echo "== idle for $IDLE s"; break; }
    read -r -t 0.2 -u 9 _
done
echo "== poweroff $(date -u +%T)"
kill -TERM -1 2>/dev/null
sleep 0.5
sync
umount /lab 2>/dev/null
echo o > /proc/sysrq-trigger
sleep 30
