#!/bin/bash
# What `make interop` runs, once per Debian release of the guests, one boot each:
#   trixie (Debian 13: kernel 6.12 rxe, rdma-core 56, perftest 25): the whole matrix of rdma-core
#     and perftest tools against goroce (run.sh), hwverbs on the guests' rxe and its cross tests
#     with the pure-Go engine (hwverbs.sh), and goroce next to rxe in the same VMs (vmbench.sh,
#     figures only);
#   bookworm (Debian 12: kernel 6.1 rxe, rdma-core 44, perftest 4.5): run.sh's smaller set of
#     variants (BOOKWORM_VARIANTS in run.sh; INTEROP_VARIANTS=all for the whole matrix) and
#     hwverbs.sh's suites.
#
#   interop/all.sh [-k] [FILTER...]     FILTERs go to run.sh; -k leaves the last lab up
# INTEROP_SUITES="trixie bookworm" (the default) picks the releases, in that order; each run's
# matrix and logs go to interop/out/SUITE (INTEROP_OUT/SUITE).
# Exit: 0 all passed; 1 something failed; 77 the lab cannot run here (SKIPPED, never a pass).
source "$(dirname "$0")/lib.sh"

KEEP=0
[ "${1:-}" = -k ] && { KEEP=1; shift; }
SUITES=${INTEROP_SUITES:-trixie bookworm}
need_root
rc=0 pass=0 fail=0 last="" base=${INTEROP_OUT:-$IOP/out}
for s in $SUITES; do
    case $s in trixie | bookworm) ;; *) die "INTEROP_SUITES: $s is neither trixie nor bookworm" ;; esac
    export GOROCE_LAB_SUITE=$s INTEROP_OUT=$base/$s
    t0=$(now)
    log "=== interop on $s guests"
    r=0
    "$IOP/run.sh" -k "$@" || r=$?
    [ $r = 77 ] && exit 77
    [ $r = 0 ] || rc=1
    line=$(grep -E "^$s: [0-9]+ passed, [0-9]+ failed$" "$INTEROP_OUT/matrix.txt" 2> /dev/null | tail -1)
    if [ -n "$line" ]; then
        pass=$((pass + $(awk '{ print $2 }' <<< "$line"))) fail=$((fail + $(awk '{ print $4 }' <<< "$line")))
    else
        fail=$((fail + 1)) # no matrix: the run itself failed
    fi
    if [ "$s" = bookworm ]; then
        "$IOP/hwverbs.sh" -k suite || { r=$?; [ $r = 77 ] && r=1; rc=1; echo "hwverbs.sh suite ($s): rc $r" >&2; }
    else
        "$IOP/hwverbs.sh" -k || { r=$?; [ $r = 77 ] && r=1; rc=1; echo "hwverbs.sh ($s): rc $r" >&2; }
        "$IOP/vmbench.sh" -k || { echo "vmbench.sh ($s) failed" >&2; rc=1; }
    fi
    log "=== $s done in $(elapsed "$t0") s"
    last=$s
done
if [ $KEEP = 0 ] && [ -n "$last" ]; then GOROCE_LAB_SUITE=$last lab_down > /dev/null 2>&1; fi
# The failed cases again, last, where a log's tail shows them.
for s in $SUITES; do
    awk -F'\t' -v s="$s" '$2 != "PASS" { printf "interop: %s %s %s %ss: %s\n", s, $1, $2, $3, $4 }' "$base/$s/results.tsv" 2> /dev/null || true
done
echo "interop: $pass passed, $fail failed"
exit $rc
