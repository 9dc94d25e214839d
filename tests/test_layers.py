"""The package's layers (.importlinter, docs/development.md "Layers"): imports point down
and no two modules or packages import each other, function-level imports included."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


def _lint_imports():
    exe = os.path.join(os.path.dirname(sys.executable), 'lint-imports')
    if not os.path.exists(exe):
        exe = shutil.which('lint-imports')
    if exe is None:  # scripts/setup.sh installs it: a missing one is a broken set-up
        pytest.fail('lint-imports (import-linter) is not installed next to {}; run make '
                    'setup'.format(sys.executable))
    return exe


def test_import_linter_contracts_are_kept_with_nothing_ignored():
    with open(os.path.join(ROOT, '.importlinter')) as f:
        text = f.read()
    assert 'ignore_imports' not in text  # no import is let off
    assert 'exhaustive = True' in text   # every part of the package sits in a layer
    proc = subprocess.run([_lint_imports(), '--no-cache'], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
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
                          universal_newlines=True, timeout=120)
    assert proc.returncode != 0
    assert 'chainermn_torus.algorithms is not allowed to import chainermn_torus.planning' \
        in proc.stdout, proc.stdout[-3000:]
