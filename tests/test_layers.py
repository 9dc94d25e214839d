"""The package's layers (.importlinter, docs/development.md "Layers"): imports point down
and no two modules or packages import each other, function-level imports included."""
import os
import shutil
import subprocess
import sys

import pytest

from chainermn_torus.runtime.cpu import jit
from conftest import ROOT


def _lint_imports():
    exe = os.path.join(os.path.dirname(sys.executable), 'lint-imports')
    if not os.path.exists(exe):
        exe = shutil.which('lint-imports')
    if exe is None:  # scripts/setup.sh installs it: a missing one is a broken set-up
        pytest.fail(f'lint-imports (import-linter) is not installed next to {sys.executable}; run '
                    'make '
                    'setup')
    return exe


def test_import_linter_contracts_are_kept_with_nothing_ignored():
    with open(os.path.join(ROOT, '.importlinter')) as f:
        text = f.read()
    assert 'ignore_imports' not in text  # no import is let off
    assert 'exhaustive = True' in text   # every part of the package sits in a layer
    proc = subprocess.run([_lint_imports(), '--no-cache'], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert 'Contracts: 2 kept, 0 broken.' in proc.stdout, proc.stdout[-2000:]


def test_a_module_importing_upward_breaks_the_contract(tmp_path):
    # The check can fail: a copy of the package where the bottom layer imports the planner.
    pkg = tmp_path / 'chainermn_torus'
    shutil.copytree(os.path.join(ROOT, 'chainermn_torus'), str(pkg),
                    ignore=shutil.ignore_patterns('__pycache__'))
    with open(str(pkg / 'algorithms' / 'flat.py'), 'a') as f:
        f.write('\n\ndef _upward():\n    from chainermn_torus.planning import planner\n'
                '    return planner\n')
    shutil.copy(os.path.join(ROOT, '.importlinter'), str(tmp_path))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = subprocess.run([_lint_imports(), '--no-cache'], cwd=str(tmp_path), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120)
    assert proc.returncode != 0
    assert 'chainermn_torus.algorithms is not allowed to import chainermn_torus.planning' \
        in proc.stdout, proc.stdout[-3000:]


# The only reasons for an import inside a function (docs/development.md, "Layers"): the
# module starts MPI when imported (mpi4py.MPI, and the optimizers, which import it), or it
# is an optional package (numba and the kernels built on it, matplotlib, Pillow, SimGrid,
# ml_dtypes),
# or it is Chainer, in the two modules read before Chainer is imported (the one that
# imports it, and the list of Chainer's private names it reads).
LAZY_ALLOWED = ('mpi4py', 'numba', 'matplotlib', 'PIL', 'simgrid', 'ml_dtypes',
                'chainermn_torus.optimizers') + jit.kernel_modules()
BEFORE_CHAINER = ('chainermn_torus/runtime/chainer_glue/chainer_import.py',
                  'chainermn_torus/runtime/chainer_glue/chainer_private.py')


def _function_level_imports():
    import ast
    import pathlib
    for path in sorted(pathlib.Path(ROOT, 'chainermn_torus').rglob('*.py')):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [f'{node.module}.{a.name}' for a in node.names]
                else:
                    continue
                for name in names:
                    yield path.relative_to(ROOT), node.lineno, name


def test_imports_inside_functions_only_for_mpi_start_or_optional_packages():
    found = list(_function_level_imports())
    assert found  # the check sees them
    other = [f'{p}:{line} {name}' for p, line, name in found
             if not any(name == a or name.startswith(a + '.') for a in LAZY_ALLOWED)
             and not (str(p) in BEFORE_CHAINER and name.split('.')[0] == 'chainer')]
    assert not other, other


def test_the_watchers_package_starts_alone_and_imports_only_the_standard_library():
    # The watcher processes run `python -I -S` with the package alone on their path: an
    # import of the rest of the package (atomic.py's once, when files were loaded by path)
    # failed there, and a killed watchdog's board was left in /dev/shm. Every module is
    # imported here as the watcher processes import it.
    from chainermn_torus.watchers import command
    folder = os.path.join(ROOT, 'chainermn_torus', 'watchers')
    modules = sorted(n[:-3] for n in os.listdir(folder) if n.endswith('.py'))
    assert {'processes', 'ranks', 'board_layout', 'temporaries', 'rank_watch',
            'startup_watch', '__main__'} <= set(modules), modules
    argv = command.argv('none')
    code = argv[4].replace('from watchers.__main__ import main; sys.exit(main(sys.argv[1:]))',
                           'import importlib; [importlib.import_module("watchers." + m) for m '
                           'in sys.argv[1:]]; print(sorted(n for n in sys.modules if '
                           'n.startswith("chainermn")))')
    proc = subprocess.run(argv[:4] + [code] + [m for m in modules if m != '__init__'],
                          capture_output=True, text=True, cwd='/')
    assert proc.returncode == 0 and proc.stdout.strip() == '[]', proc.stderr[-2000:]
    # the entry refuses what it does not know, in one line
    proc = subprocess.run(argv, capture_output=True, text=True, cwd='/')
    assert proc.returncode == 2 and "one of rank, startup, got ['none']" in proc.stderr
