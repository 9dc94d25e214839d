#!/usr/bin/env bash
# test_lanes.sh: `make test`'s pytest runs (MPI, OTHER_MPIS and PY from make): two lanes side
# by side, then the MPI worlds with nothing beside them. Exit 1 if any run failed.
#
#   lane A (into a log, shown when lane B ends): the root tests (the fault matrix: 2-rank
#          jobs that mostly wait, by design; the emulated cluster; Slurm), the aarch64 jobs
#          under QEMU, then the fast MPI set under each of OTHER_MPIS
#   lane B (as it comes): every other test but the worlds' (tests/conftest.py runs those
#          that start no MPI rank first, so the fault matrix has the tests beside it whose
#          processes never spin in MPI)
#   then:  the tests in the session's MPI worlds of 1-8 ranks (marker `world`): MPICH's
#          ranks spin while they wait, and beside other work they ran 2.7 times slower
#
# Why: one pytest after another kept 1.35 of the 2 cores busy: the fault matrix about one,
# the tests that start no rank little more, the other MPIs' fast sets (whose ranks give their
# core up while they wait) about 1.2. Nothing is shared between lanes: each pytest has its
# own temporary folders and worlds, each fault-matrix row its own /dev/shm, each MPI its own
# prefix (scripts/with_mpi.sh). docs/development.md ("Two test tiers") has the figures.
set -uo pipefail
cd "$(dirname "$0")/.."
mpi=${MPI:-mpich}
py=${PY:-.venv/bin/python}
only=
[ "$mpi" = mpich ] || only='mpi and '   # under another MPI, the tests that start MPI jobs
lane_a_files='tests/test_aarch64.py'

run_pytest() { bash scripts/with_mpi.sh "$mpi" "$py" -m pytest -q "$@"; }

lane_a() {
    local rc=0 m
    run_pytest --durations=10 -m "${only}root" tests || rc=1
    # shellcheck disable=SC2086  # a list of files
    run_pytest -m "${only}not root and not world" $lane_a_files || rc=1
    for m in ${OTHER_MPIS:-}; do
        echo "[test] the fast MPI set under $m"
        make --no-print-directory test-fast MPI="$m" || rc=1
    done
    return $rc
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
lane_a > "$log" 2>&1 &
lane=$!
failed=()
ignore=()
for f in $lane_a_files; do ignore+=("--ignore=$f"); done
run_pytest --durations=30 -m "${only}not root and not world" "${ignore[@]}" tests \
    || failed+=('lane B')
wait "$lane" || failed+=('lane A')
echo "[test] lane A: the root tests, $lane_a_files${OTHER_MPIS:+, the fast MPI set under $OTHER_MPIS}"
cat "$log"
echo "[test] the MPI worlds"
run_pytest --durations=10 -m "${only}world" tests || failed+=('the worlds')
if [ ${#failed[@]} -gt 0 ]; then
    echo "[test] failed: ${failed[*]}" >&2
    exit 1
fi
