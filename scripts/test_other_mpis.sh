#!/usr/bin/env bash
# test_other_mpis.sh MPI...: `make test-fast MPI=name` for each MPI, side by side, each
# into a log of its own; then the logs one after the other, and exit 1 if any set failed.
#
# Why side by side: each set alone keeps about 1.2 of 2 cores busy (30 s of pytest, mostly
# interpreters starting and worlds of 2 and 3 ranks, whose Intel MPI and Open MPI ranks give
# their core up while they wait), so two together finish in less than the two one after the
# other. Nothing of theirs is shared: each MPI has its own prefix under .venv/mpi
# (scripts/with_mpi.sh), each pytest its own temporary folders and worlds.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || exit 0
logs=$(mktemp -d)
pids=()
for m in "$@"; do
    make --no-print-directory test-fast MPI="$m" > "$logs/$m.log" 2>&1 &
    pids+=("$!")
done
failed=()
for i in "${!pids[@]}"; do
    m=${*:i+1:1}
    wait "${pids[$i]}" || failed+=("$m")
    echo "[test] the fast MPI set under $m"
    cat "$logs/$m.log"
done
rm -rf "$logs"
if [ ${#failed[@]} -gt 0 ]; then
    echo "[test] the fast MPI set failed under: ${failed[*]}" >&2
    exit 1
fi
