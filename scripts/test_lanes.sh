#!/usr/bin/env bash
# test_lanes.sh: `make test`'s pytest runs (MPI, ONLY, OTHER_MPIS, PARTS and PY from make).
# Exit 1 if any of them failed, naming it.
#
#   1. two lanes side by side:
#      lane A (into a log, shown when lane B ends): the aarch64 Python's build (PARTS: root
#             and apt), the root tests (the fault matrix: 2-rank jobs that mostly wait, by
#             design; the emulated cluster; Slurm; the cluster recipe, whose mpi4py build
#             is a minute of one core at -O0), then the files of lane_a_files: the aarch64
#             job under QEMU, the unchanged scripts (and their resumes after a kill), auto's
#             tuning ended at each stage and the benchmarks' smoke runs: jobs whose checks do
#             not depend on speed, so that the two lanes end about together
#      lane B (as it comes): every other test but the worlds'; tests/conftest.py runs those
#             that start no MPI rank first, so beside the fault matrix run processes that
#             never wait in MPI
#   2. the tests in the session's MPI worlds of 1-4 and 6 ranks (marker `world`; those at 5, 7
#      and 8 ranks, marker `wide`, are `make test-wide`'s), with nothing
#      beside them: MPICH's ranks spin while they wait, and beside other work they ran 2.7
#      times slower (docs/development.md)
#   3. the fast MPI set under each of OTHER_MPIS, side by side (their ranks give their core up
#      while they wait: tests/conftest.py, job_env)
#
# Why: one pytest after another kept 1.35 of the 2 cores busy, the fault matrix about one;
# two lanes 1.6. A third lane (the fast sets) kept them 96 % busy and ended no sooner, and
# so did lane B in two pytest-xdist workers: on a fresh clone the lanes are CPU-bound (94-100 %
# busy), and the tier is its CPU-seconds (docs/measurements/test-timings.md).
# Nothing is shared between lanes: each pytest has its own temporary folders and worlds, each
# fault-matrix row its own /dev/shm, each MPI its own prefix (scripts/with_mpi.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
mpi=${MPI:-mpich}
py=${PY:-.venv/bin/python}
only=${ONLY:-}   # 'mpi and ' under another MPI: the tests that start MPI jobs (Makefile)
lane_a_files='tests/scripts/test_aarch64.py tests/launch/test_unchanged_scripts.py
              tests/tuning/test_tune.py tests/launch/test_unchanged_checkpoints.py
              tests/bench/test_benchmarks.py'
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
failed=()

run_pytest() { bash scripts/with_mpi.sh "$mpi" "$py" -m pytest -q "$@"; }

lane_a() {
    local rc=0
    if [ -n "${PARTS:-}" ]; then  # root and apt (Makefile): the aarch64 Python for its tests
        bash scripts/aarch64_root.sh || rc=1
    fi
    run_pytest --durations=10 -m "${only}root" tests || rc=1
    # shellcheck disable=SC2086  # a list of files
    run_pytest --durations=10 -m "${only}not root and not world" $lane_a_files || rc=1
    return $rc
}

lane_a > "$logs/a" 2>&1 &
lane=$!
ignore=()
for f in $lane_a_files; do ignore+=("--ignore=$f"); done
run_pytest --durations=30 -m "${only}not root and not world" "${ignore[@]}" tests \
    || failed+=('lane B')
wait "$lane" || failed+=('lane A')
echo "[test] lane A: the aarch64 build (root), the root tests, then" $lane_a_files
cat "$logs/a"

echo "[test] the MPI worlds"
run_pytest --durations=10 -m "${only}world and not wide" tests || failed+=('the worlds')

pids=()
for m in ${OTHER_MPIS:-}; do
    # SETUP=: make test has just set up (its checks took 4 s of each set)
    make --no-print-directory test-fast MPI="$m" SETUP= > "$logs/$m" 2>&1 &
    pids+=("$!")
done
set -- ${OTHER_MPIS:-}
for pid in "${pids[@]}"; do
    wait "$pid" || failed+=("the fast MPI set under $1")
    echo "[test] the fast MPI set under $1"
    cat "$logs/$1"
    shift
done

# What killed jobs of the tests left in /dev/shm that no process maps any more (Open MPI's
# sm_segment.* of ranks ended by a test: 16 MiB each, seen in two runs of four): never a file
# a live process maps; files of the last 5 s stay (one may be between its creation and its
# mapping).
"$py" -c 'from chainermn_torus.runtime.files import devshm
for name, size, why in devshm.sweep(others=True, min_age=5):
    print("[test] removed /dev/shm/{} ({} bytes): {}".format(name, size, why))'

if [ ${#failed[@]} -gt 0 ]; then
    echo "[test] failed: ${failed[*]}" >&2
    exit 1
fi
