"""``chainermn-torus kernels`` (tools/kernel_cache.py): the numba kernels compiled into the
cache ahead of a job are the ones the job's calls then load."""
import ast
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, assert_ok, pythonpath, run_mpi, worker
from chainermn_torus.runtime.cpu import jit
from chainermn_torus.tools import kernel_cache

PACKAGE = os.path.join(ROOT, 'chainermn_torus')
SUMMARY = re.compile(r"kernels: (\d+) kernels, (\d+) argument types: (\d+) compiled into "
                     r"numba's cache, (\d+) there already")


def _tool(env, *args):
    return subprocess.run([sys.executable, '-m', 'chainermn_torus.tools.cli', 'kernels']
                          + list(args), capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **env), cwd=ROOT)


def test_every_cached_kernel_of_the_package_is_declared_and_found(tmp_path):
    # A kernel cached by numba but not declared would compile in every rank again; the
    # declared ones are found from the source (jit.kernel_modules), so none is left out of
    # the ahead-of-time compile. The benchmark's own kernels (bench/) run in its one process
    # and stay plain numba.
    plain = []
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith('.py'):
                continue
            path = os.path.join(folder, name)
            module = os.path.relpath(path[:-3], ROOT).replace(os.sep, '.')
            if re.search(r'numba\.njit\([^)]*cache=True', open(path).read()) and \
                    '.bench.' not in module and module != 'chainermn_torus.runtime.cpu.jit':
                plain.append(module)
    assert not plain, plain
    modules = jit.kernel_modules()
    assert 'chainermn_torus.compute.kernels.relu' in modules and \
        'chainermn_torus.runtime.cpu.jit' not in modules and len(modules) >= 9, modules
    found = kernel_cache.kernels()
    assert {m for m, _, _ in found} == set(modules)
    assert len(found) >= 19 and all(d.ahead for _, _, d in found), found
    # the rule reads the decorator, not a mention of it
    assert jit._declares_kernels(ast.parse('@jit.kernel("(float32[::1],)")\ndef f(x): pass'))
    assert not jit._declares_kernels(ast.parse('"""jit.kernel( in a docstring"""'))


def test_arguments_writes_numbas_notation():
    assert jit.arguments('float32', 2, 1, 'boolean') == \
        '(float32[::1], float32[::1], float32, boolean)'
    assert jit.arguments('float64', 1) == '(float64[::1])'


def test_a_bad_process_count_is_refused_naming_it(capsys):
    with pytest.raises(SystemExit) as e:
        kernel_cache.main(['--processes', '0'])
    assert e.value.code == 2
    assert '--processes must be 1 or more, got 0' in capsys.readouterr().err


def test_without_numba_there_is_nothing_to_compile_and_it_says_so(no_numba):
    proc = _tool({'PYTHONPATH': pythonpath(no_numba)})
    assert proc.returncode == 0, proc.stderr
    assert 'numba is not installed: nothing to compile' in proc.stdout


@pytest.mark.slow  # compiles every kernel into an empty cache: about 10 CPU-s
def test_kernels_compiled_ahead_are_what_a_job_loads(tmp_path):
    env = {'NUMBA_CACHE_DIR': str(tmp_path / 'cache')}
    declared = {f'{m}.{n}': len(d.ahead) for m, n, d in kernel_cache.kernels()}
    types = sum(declared.values())
    first = _tool(env)
    assert first.returncode == 0, first.stderr
    assert SUMMARY.search(first.stdout).groups() == (
        str(len(declared)), str(types), str(types), '0'), first.stdout
    again = _tool(env, '--processes', '1')
    assert SUMMARY.search(again.stdout).groups() == (
        str(len(declared)), str(types), '0', str(types)), again.stdout
    # A job's ranks, through the package's own calls, load every declared type and compile
    # nothing: the declarations are the types the package calls its kernels with.
    prefix = str(tmp_path / 'kernels')
    # 4 ranks: the exact sum's kernels of one term a process need a column, or a row of
    # more than 2, besides a row of 2 (tests/mpi_workers/kernel_workload.py)
    proc = run_mpi(4, [worker('kernel_workload.py'), prefix], env=env)
    assert_ok(proc, 4)
    for rank in range(4):
        with open(f'{prefix}.{rank}.json') as f:
            report = json.load(f)
        assert {k: len(v[0]) for k, v in report.items()} == declared, report
        assert not any(v[1] for v in report.values()), report
