#!/usr/bin/env bash
# test_fast.sh: `make test-fast` (MPI, ONLY and PY from make): the quick tier in two lanes side
# by side, then the tests of the session's MPI worlds alone. Exit 1 if any part failed,
# naming it.
#
# One pytest kept one of the 2 cores busy (80 CPU-s in 76 s); the tier's tests that start no
# world split by folder into two lanes of about the same CPU-seconds (measured with
# --durations=0: lane A 30 s, lane B 29 s of tests, each with its own collection), and the
# worlds' 40 tests (15 s) after them with nothing beside: MPICH's ranks spin while they wait
# (scripts/test_lanes.sh says why).
set -uo pipefail
cd "$(dirname "$0")/.."
mpi=${MPI:-mpich}
py=${PY:-.venv/bin/python}
marks="${ONLY:-}not slow and not example and not root"
lane_a='tests/test_process_changes.py tests/runtime tests/loader tests/launch
        tests/test_types.py tests/compute tests/extensions'
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=()

run_pytest() { bash scripts/with_mpi.sh "$mpi" "$py" -m pytest -q "$@"; }

if [ -n "${ONLY:-}" ]; then  # another MPI's few tests (make test's last phase): one pytest
    run_pytest -m "$marks" tests
    exit $?
fi
# shellcheck disable=SC2086  # a list of paths
run_pytest -m "$marks and not world" $lane_a > "$log" 2>&1 &
lane=$!
ignore=()
for f in $lane_a; do ignore+=("--ignore=$f"); done
run_pytest -m "$marks and not world" "${ignore[@]}" tests || failed+=('lane B')
wait "$lane" || failed+=('lane A')
echo "[test-fast] lane A:"
cat "$log"
run_pytest -m "$marks and world" tests || failed+=('the worlds')
if [ ${#failed[@]} -gt 0 ]; then
    echo "[test-fast] failed: ${failed[*]}"
    exit 1
fi
