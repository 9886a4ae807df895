#!/bin/bash
# goroce interop lab: two Debian VMs with the kernel's soft-RoCE (rxe0) on a bridge in the
# network namespace goroce-lab, host end 198.18.0.1 (see README.md and lib.sh). The guests run
# Debian 13 (trixie) unless GOROCE_LAB_SUITE=bookworm (Debian 12).
#
#   lab.sh build [--force]       build the guest image once (cached in $GOROCE_LAB_DIR/img/SUITE)
#   lab.sh peers DIR             build the C peers (interop/peers) for the guests' release into DIR
#   lab.sh up                    image + namespace + boot VM1 and VM2, wait until rxe0 is ACTIVE
#   lab.sh down                  power off the VMs, stop them by pid, delete the namespace
#   lab.sh status                VMs, namespace links and addresses, nftables rules
#   lab.sh run [-t S] VM 'cmd'   run a shell command in VM 1 or 2 (timeout S, default 60)
#   lab.sh bg [-t S] VM 'cmd'    start it in the background, print the job id
#   lab.sh wait VM ID            wait for a background job; prints its output, returns its rc
#   lab.sh cancel VM ID          stop a background job
#   lab.sh push FILE...          copy files to /lab/bin in the guests (on their PATH)
#   lab.sh mtu 1500|9000         guest eth0 and vhost0 MTU (rxe path MTU 1024 | 4096)
#   lab.sh loss PCT [tapN...]    drop PCT % of UDP/4791 to and from tapN (default tap1)
#   lab.sh noloss                print the drop counters and remove the loss rules
#   lab.sh ns 'cmd'              run a command in the namespace (e.g. tcpdump -ni br0)
# Exit code 77: the lab cannot be built or booted here (the reason is printed).
source "$(dirname "$0")/lib.sh"

tmo_arg() { # parses an optional -t S; sets T and SHIFTN
    T=60 SHIFTN=0
    if [ "${1:-}" = -t ]; then T=${2:?-t needs seconds}; SHIFTN=2; fi
}

cmd=${1:-status}
shift || true
case "$cmd" in
build) need_root; build_image "${1:-}"; echo "$SUITE image ready in $IMG: kernel $(cat "$IMG/kver"); $(paste -sd';' "$IMG/versions")" ;;
peers)
    need_root
    d=${1:?peers DIR}
    build_peers "$IOP/peers" "$d" || die "the C peers did not build for $SUITE"
    echo "C peers for $SUITE in $d: $(make -s -C "$IOP/peers" list)"
    ;;
up) lab_up ;;
down) need_root; lab_down; echo "lab down" ;;
status)
    for n in $VMS; do
        if vm_ready "$n"; then echo "vm$n $(vm_ip "$n") running $(cat "$(vm_dir "$n")/suite" 2> /dev/null) (qemu pid $(cat "$(vm_dir "$n")/qemu.pid"))"
        else echo "vm$n not running"; fi
    done
    if ns_exists; then
        nsip -br link; nsip -br addr
        ip netns exec "$NS" nft list ruleset 2> /dev/null
    else
        echo "namespace $NS absent"
    fi
    ;;
run | bg)
    tmo_arg "$@"; shift "$SHIFTN"
    vm=${1:?VM number}; vm=${vm#vm}; shift
    [ $# -gt 0 ] || die "no command"
    vm_ready "$vm" || die "vm$vm is not running (lab.sh up)"
    if [ "$cmd" = bg ]; then job_start "$vm" "$T" "$*"; exit 0; fi
    vm_run "$vm" "$T" "$*"
    ;;
wait)
    vm=${1:?VM}; vm=${vm#vm}; id=${2:?job id}
    [ -e "$(jobs_dir "$vm")/$id.cmd" ] || die "no job $id in vm$vm"
    lim=$(cat "$(jobs_dir "$vm")/$id.job" "$(jobs_dir "$vm")/$id.run" 2> /dev/null | head -1)
    job_wait "$vm" "$id" $((${lim:-600} + 30)); rc=$?
    job_out "$vm" "$id"
    [ $rc = 255 ] && echo "no result for job $id" >&2
    exit $rc
    ;;
cancel) vm=${1:?VM}; vm=${vm#vm}; job_cancel "$vm" "${2:?job id}" ;;
push) [ $# -gt 0 ] || die "push FILE..."; push_files "$@" ;;
mtu) set_mtu "${1:?1500 or 9000}" && echo "eth0/vhost0 MTU $1" ;;
loss) loss_on "${1:?percent}" "${@:2}" ;;
noloss) loss_off ;;
ns) [ $# -gt 0 ] || die "ns 'cmd'"; exec ip netns exec "$NS" bash -c "$*" ;;
*) sed -n '2,22s/^# \{0,1\}//p' "$0"; exit 2 ;;
esac
