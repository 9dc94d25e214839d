#!/usr/bin/env bash
# aarch64_root.sh: an aarch64 Python with this project's packages, run under QEMU user-mode
# emulation, for the portability tests (make test-aarch64; docs/portability.md).
#
# Builds $VENV/aarch64 (default .venv/aarch64, about 200 MB) from real parts:
#   sysroot/  Debian bookworm's arm64 python3.11 and the libraries it needs (apt-get download
#             + dpkg -x: nothing is installed into this machine's own arm64 multiarch)
#   site/     the PyPI aarch64 wheels of the versions in the x86 venv (numpy, mpi4py, numba,
#             llvmlite, psutil, threadpoolctl, ...), and Chainer's pure-Python packages
#   mpich/    the mpich wheel's aarch64 libmpi (mpi4py loads it through MPI4PY_LIBMPI)
#   bin/python  qemu-aarch64-static -L sysroot sysroot/usr/bin/python3.11 with that path
#
# Why not binfmt_misc: it is a host setting (and absent in the sandbox this was built in);
# an explicit qemu per process needs nothing from the host kernel. The price: an emulated
# process cannot exec another aarch64 program (no subprocess of sys.executable), so MPI
# jobs start with the x86 venv's mpiexec, each rank being bin/python: MPICH's PMI wire
# protocol is the same on both sides.
#
# Needs root and apt (dpkg --add-architecture arm64, qemu-user-static). Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$here/.venv}
root=${AARCH64_ROOT:-$venv/aarch64}
xpy="$venv/bin/python"

# The bytecode of the stdlib and the packages, written by the x86 Python (3.11 both: one
# bytecode format). Debian writes the stdlib's in its postinst, which `dpkg -x` does not run,
# and where PYTHONDONTWRITEBYTECODE is set (as on CI's image) no aarch64 interpreter writes
# its own: each one compiled every module it imported, under QEMU (the aarch64 tests took
# 69 s with it and 38 s without, on a cold numba cache). Up-to-date files are skipped (0.6 s);
# test suites (the stdlib's test/, the packages' tests/: 695 of 2,778 files) are never
# imported by a rank and are left out.
compile_bytecode() {
    "$xpy" -m compileall -q -j 0 -x '/tests?/' "$1/site" "$1/sysroot/usr/lib/python3.11" \
        >/dev/null 2>&1 || true
}

if [ -x "$root/bin/python" ] && compile_bytecode "$root" \
        && "$root/bin/python" -c 'import chainer, numpy, mpi4py.MPI, numba' >/dev/null 2>&1; then
    echo "[aarch64] ready: $root/bin/python"
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "[aarch64] needs root and apt-get (arm64 packages, qemu-user-static)" >&2
    exit 1
fi
[ -x "$xpy" ] || { echo "[aarch64] run make setup first (the x86 venv gives the versions)" >&2; exit 1; }

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
fi
echo "[aarch64] apt: arm64 package lists, qemu-user-static"
apt-get update -qq
command -v qemu-aarch64-static >/dev/null \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static >/dev/null

rm -rf "$root.tmp"
mkdir -p "$root.tmp/debs" "$root.tmp/wheels" "$root.tmp/sysroot" "$root.tmp/site" \
         "$root.tmp/mpich" "$root.tmp/bin"
# python3.11 and what it links, plus libstdc++/libgomp for numba and the MPICH wheel. dpkg,
# tar and install-info come in through Pre-Depends and are not needed to run Python.
pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
           --no-replaces --no-enhances --no-pre-depends \
           python3.11:arm64 libstdc++6:arm64 libgomp1:arm64 \
       | grep -E '^[a-z0-9].*:arm64$' | grep -vE '^(dpkg|tar|install-info):' | sort -u)
# Chainer imports numpy.distutils, which needs the distutils Debian ships apart from the
# standard library (architecture-independent packages).
pkgs="$pkgs python3-distutils python3-lib2to3"
echo "[aarch64] apt-get download: $(echo "$pkgs" | wc -w) arm64 packages"
# shellcheck disable=SC2086  # a list of package names
(cd "$root.tmp/debs" && apt-get download $pkgs 2>&1 >/dev/null | grep -v "unsandboxed as root" >&2) || true
ls "$root.tmp"/debs/python3.11_*_arm64.deb >/dev/null
for deb in "$root.tmp"/debs/*.deb; do dpkg -x "$deb" "$root.tmp/sysroot"; done

# The same versions as the x86 venv, as aarch64 wheels (pip can fetch another platform's
# wheels but not install them: they are unpacked below, as a wheel is a zip).
specs=$("$xpy" - <<'PY'
import importlib.metadata as md
names = ['numpy', 'mpi4py', 'mpich', 'numba', 'llvmlite', 'threadpoolctl', 'psutil',
         'filelock', 'typing_extensions', 'six', 'setuptools']  # Chainer: pkg_resources
print(' '.join('{}=={}'.format(n, md.version(n)) for n in names))
PY
)
echo "[aarch64] pip download (aarch64 wheels): $specs"
# shellcheck disable=SC2086  # a list of requirement specs
"$xpy" -m pip --disable-pip-version-check -q download --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --platform manylinux2014_aarch64 \
    --platform manylinux_2_17_aarch64 --platform manylinux_2_28_aarch64 \
    -d "$root.tmp/wheels" $specs 2>&1 | grep -v "^WARNING: Location 'file:" >&2 || true
"$xpy" - "$root.tmp" <<'PY'
import glob, os, shutil, sys, zipfile
root = sys.argv[1]
for wheel in sorted(glob.glob(os.path.join(root, 'wheels', '*.whl'))):
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            parts = info.filename.split('/')
            if parts[0].endswith('.data'):
                if parts[1] != 'data' or len(parts) < 3:   # purelib/platlib: none here
                    continue
                dest = os.path.join(root, 'mpich', *parts[2:])  # mpich's lib/ and bin/
            else:
                dest = os.path.join(root, 'site', *parts)
            if info.is_dir():
                continue
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with z.open(info) as src, open(dest, 'wb') as out:
                shutil.copyfileobj(src, out)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(dest, mode)
PY
# Chainer 7.8.1 is pure Python (its sdist builds nothing): the x86 venv's packages serve.
site_x86=$("$xpy" -c 'import chainer, os; print(os.path.dirname(os.path.dirname(chainer.__file__)))')
for pkg in chainer chainermn chainerx onnx_chainer; do
    cp -r "$site_x86/$pkg" "$root.tmp/site/"
done
find "$root.tmp/site" -name __pycache__ -prune -exec rm -rf {} +
[ -f "$root.tmp/mpich/lib/libmpi.so.12" ] \
    || { echo "[aarch64] the mpich wheel has no lib/libmpi.so.12" >&2; exit 1; }

rm -rf "$root"
mv "$root.tmp" "$root"
compile_bytecode "$root"
rm -rf "$root/debs" "$root/wheels"
cat > "$root/bin/python" <<EOF
#!/bin/sh
# An aarch64 Python 3.11 under QEMU user-mode emulation (scripts/aarch64_root.sh).
# After PYTHONPATH, as a venv's site-packages come after it.
export PYTHONPATH="\${PYTHONPATH:+\$PYTHONPATH:}$root/site"
export MPI4PY_LIBMPI="$root/mpich/lib/libmpi.so.12"
export NUMBA_CACHE_DIR="$root/numba-cache"
# QEMU user mode has no process_vm_readv (ENOSYS): MPICH's large intra-node messages must
# not use cross-memory attach.
export MPIR_CVAR_CH4_CMA_ENABLE=0
exec qemu-aarch64-static -L "$root/sysroot" "$root/sysroot/usr/bin/python3.11" "\$@"
EOF
chmod +x "$root/bin/python"
"$root/bin/python" -c 'import platform, numpy, mpi4py, chainer; print("[aarch64] ready:", platform.machine(), "python", platform.python_version(), "numpy", numpy.__version__, "chainer", chainer.__version__)'
echo "[aarch64] $root/bin/python (libmpi: mpich/lib/libmpi.so.12)"
