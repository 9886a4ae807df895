#!/bin/bash
# What `make interop` runs, on one boot of the lab: the matrix of rdma-core and perftest tools
# against goroce (run.sh), hwverbs on the guests' rxe and its cross tests with the pure-Go engine
# (hwverbs.sh), and goroce next to rxe in the same VMs (vmbench.sh, figures only).
#
#   interop/all.sh [-k] [FILTER...]     FILTERs go to run.sh; -k leaves the lab up
# Exit: 0 all passed; 1 something failed; 77 the lab cannot run here (SKIPPED, never a pass).
source "$(dirname "$0")/lib.sh"

KEEP=0
[ "${1:-}" = -k ] && { KEEP=1; shift; }
need_root
was_up=0
if vm_ready 1 && vm_ready 2 && ns_exists; then was_up=1; fi
rc=0
"$IOP/run.sh" -k "$@" || rc=$?
[ $rc = 77 ] && exit 77
"$IOP/hwverbs.sh" -k || { r=$?; [ $r = 77 ] && r=1; rc=1; echo "hwverbs.sh: rc $r" >&2; }
"$IOP/vmbench.sh" -k || { echo "vmbench.sh failed" >&2; rc=1; }
if [ $was_up = 0 ] && [ $KEEP = 0 ]; then lab_down > /dev/null 2>&1; fi
exit $rc
