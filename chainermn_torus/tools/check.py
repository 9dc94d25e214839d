"""``chainermn-torus check``: what this install has and what a job will use, one line each,
on a login or a compute node (no MPI job is started: MPI is loaded, not initialised).

Each line is ``ok``, ``--`` (works, but slower or without a feature: the line says what and
how to add it) or ``NO`` (a job needs it): the MPI library mpi4py was built against and the
one it loads, the launcher on the PATH and whether it is the same MPI; Chainer and numpy;
oneDNN; numba and its cache; bfloat16 on this CPU; cores; /dev/shm room; the communicators.
The exit code is 1 where a line says ``NO``. ``--json``: the lines as a list of objects.
"""
import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys

import chainermn_torus  # noqa: F401  (first: Chainer's import after it)
import chainer
import numpy

from chainermn_torus import communicators
from chainermn_torus.compute import precision
from chainermn_torus.compute.onednn import binding
from chainermn_torus.runtime import report
from chainermn_torus.runtime.files import devshm

__all__ = ['main', 'rows', 'mpi_family']

# An MPI's family, from its library version or its launcher's --version (first match).
_FAMILIES = (('Open MPI', r'Open MPI|OpenRTE'), ('Intel MPI', r'Intel\(R\) MPI'),
             ('MPICH', r'MPICH|HYDRA'), ('Fujitsu MPI', r'Fujitsu'))


def mpi_family(text):
    """'Open MPI', 'Intel MPI', 'MPICH', 'Fujitsu MPI' or None, from a version text."""
    for name, pattern in _FAMILIES:
        if re.search(pattern, text or ''):
            return name
    return None


def _row(name, status, value, fix=''):
    return {'name': name, 'status': status, 'value': value, 'fix': fix}


def _linked_mpi(extension):
    """The libmpi mpi4py's extension is linked to (a build from source), or None."""
    try:
        out = subprocess.run(['ldd', extension], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        name, _, where = line.strip().partition(' => ')
        if name.startswith('libmpi') and where:
            where = where.split('(')[0].strip()
            # the mpich wheel's: a name its package's path resolves when mpi4py loads it
            return f'{name} (found when loaded)' if where == 'not found' else where
    return None


def _loaded_mpi():
    """The libmpi file this process has mapped."""
    try:
        with open('/proc/self/maps') as f:
            paths = {line.split()[-1] for line in f if '/libmpi' in line}
    except OSError:
        return None
    return ', '.join(sorted(paths)) or None


def _mpi_rows():
    try:
        import mpi4py
    except ImportError:
        return [_row('mpi4py', 'NO', 'not installed',
                     'MPICC=$(which mpicc) pip install --no-binary=mpi4py mpi4py')]
    if 'mpi4py.MPI' not in sys.modules:  # loaded, not started: a login node runs no job
        mpi4py.rc.initialize = False
    try:
        from mpi4py import MPI
        library = MPI.Get_library_version().strip().splitlines()[0]
    except Exception as e:  # the library mpi4py was built against cannot be loaded
        return [_row('mpi4py', 'NO', f'{mpi4py.__version__}: its MPI cannot be loaded: {e}',
                     'load the MPI module mpi4py was built with, or rebuild mpi4py')]
    linked = _linked_mpi(MPI.__file__)
    built = f'built against {linked}' if linked else \
        'a binary wheel (it loads the libmpi it finds: MPI4PY_LIBMPI, else the loader\'s)'
    rows = [_row('mpi4py', 'ok', f'{mpi4py.__version__}, {built}')]
    library = f'{library} ({_loaded_mpi() or "path unknown"})'
    rows.append(_row('MPI library', 'ok', library))
    # The PATH's, else this Python's own (a venv with the mpich wheel, not activated).
    here = os.path.dirname(sys.executable)
    launcher = next((found for name in ('mpiexec', 'mpirun') for found in (
        shutil.which(name), shutil.which(name, path=here)) if found), None)
    if launcher is None:
        return rows + [_row('launcher', 'NO', 'no mpiexec or mpirun on the PATH',
                            "load the site's MPI module (the one mpi4py was built with)")]
    try:
        said = subprocess.run([launcher, '--version'], capture_output=True, text=True,
                              timeout=20)
        text = (said.stdout + said.stderr).strip()
    except (OSError, subprocess.SubprocessError) as e:
        text = str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = next((' '.join(ln.split()) for ln in lines if re.search(r'\d+\.\d+', ln)),
                 lines[0] if lines else 'no --version')  # its version line
    ours, theirs = mpi_family(library), mpi_family(text)
    same = ours is not None and ours == theirs
    rows.append(_row('launcher', 'ok' if same else 'NO', f'{launcher}: {first}',
                     '' if same else f'the launcher is {theirs or "unknown"} and mpi4py loads '
                     f'{ours or "an unknown MPI"}: use the mpiexec of the MPI mpi4py was '
                     'built with'))
    return rows


def _python_rows():
    rows = [_row('Python', 'ok', f'{sys.version.split()[0]} ({sys.executable})')]
    ok = chainer.__version__ == '7.8.1'
    rows.append(_row('Chainer', 'ok' if ok else 'NO', chainer.__version__,
                     '' if ok else 'pip install --no-build-isolation chainer==7.8.1'))
    ok = int(numpy.__version__.split('.')[0]) < 2
    rows.append(_row('numpy', 'ok' if ok else 'NO', numpy.__version__,
                     '' if ok else 'pip install "numpy<2" (Chainer 7.8.1 needs numpy 1)'))
    return rows


def _compute_rows():
    rows = []
    if binding.available():
        major, minor, patch, path = binding.version()
        rows.append(_row('oneDNN', 'ok', f'{major}.{minor}.{patch} ({path})'))
    else:
        fix = 'pip install "chainermn-torus[onednn]"' if platform.machine() == 'x86_64' else \
            "a site's libdnnl.so.3 (oneDNN 3.x) on LD_LIBRARY_PATH"
        rows.append(_row('oneDNN', '--', (binding.why_unavailable() or 'not loaded') +
                         "; Chainer's numpy layers (ResNet-50 2.51x slower here)", fix))
    has, what = precision.cpu_bf16()
    rows.append(_row('bfloat16', 'ok' if has else '--', what,
                     '' if has else 'precision fp32 (the default) on this CPU'))
    try:
        import numba
        from numba.core.config import CACHE_DIR
        cache = CACHE_DIR or 'beside the package (__pycache__)'
        rows.append(_row('numba', 'ok', f'{numba.__version__}, cache {cache}',
                         'chainermn-torus kernels (compile the kernels ahead of a job)'))
    except ImportError:
        rows.append(_row('numba', '--', 'not installed: no fused updates or flush-to-zero; '
                         'float16 sums and shared-memory rows in numpy', 'pip install numba'))
    return rows


def _node_rows():
    allowed = len(os.sched_getaffinity(0))
    rows = [_row('cores', 'ok', f'{os.cpu_count()} CPUs, {allowed} allowed to this process')]
    free = devshm.free_bytes()
    rows.append(_row('/dev/shm', 'ok' if free > 256 << 20 else '--',
                     f'{report.format_bytes(free)} free of '
                     f'{report.format_bytes(devshm.total_bytes())}',
                     '' if free > 256 << 20 else 'chainermn-torus clean (what dead jobs left)'))
    rows.append(_row('communicators', 'ok', ', '.join(communicators.names())))
    return rows


def rows():
    """Every line, in order (dicts: name, status, value, fix)."""
    return _mpi_rows() + _python_rows() + _compute_rows() + _node_rows()


def main(argv):
    """What this install has and what a job will use; exit 1 where a job cannot run."""
    p = argparse.ArgumentParser(prog='chainermn-torus check', description=main.__doc__)
    p.add_argument('--json', action='store_true', help='the lines as JSON')
    args = p.parse_args(argv)
    found = rows()
    if args.json:
        print(json.dumps(found, indent=1))
    else:
        width = max(len(r['name']) for r in found)
        for r in found:
            fix = f'  [{r["fix"]}]' if r['fix'] and r['status'] != 'ok' else ''
            print(f'{r["status"]:>2}  {r["name"]:<{width}}  {r["value"]}{fix}')
    return 1 if any(r['status'] == 'NO' for r in found) else 0
