"""The style check: ruff with the project's rules (ruff.toml: pyflakes, pycodestyle's errors
and warnings, lines of at most 100 characters, pyupgrade's idioms) finds nothing in the
package, the scripts, the tests and the examples; and the check can fail. The package's
code names no issue numbers: a comment says why, not which issue asked."""
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

RUFF = os.path.join(os.path.dirname(sys.executable), 'ruff')
needs_ruff = pytest.mark.skipif(not os.path.exists(RUFF) and shutil.which('ruff') is None,
                                reason='ruff is not installed (make setup installs it)')


def _ruff(*args):
    exe = RUFF if os.path.exists(RUFF) else shutil.which('ruff')
    return subprocess.run([exe, 'check', '--no-cache'] + list(args), capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


@needs_ruff
def test_the_tree_is_clean():
    proc = _ruff('.')
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


@needs_ruff
def test_the_check_finds_an_unused_import_and_a_long_line(tmp_path):
    bad = tmp_path / 'bad.py'
    bad.write_text('import os\n' + 'x = ' + '1 + ' * 30 + '1\n\n\nclass A(object):\n    pass\n')
    proc = _ruff('--config', os.path.join(ROOT, 'ruff.toml'), str(bad))
    assert proc.returncode == 1
    assert 'F401' in proc.stdout and 'E501' in proc.stdout, proc.stdout
    assert 'UP004' in proc.stdout, proc.stdout  # pyupgrade's: class A(object)


ISSUE = re.compile(r'\b[Ii]ssues? (?:no\.? ?)?#?\d+')


def test_the_package_names_no_issue_numbers():
    found = []
    for path in glob.glob(os.path.join(ROOT, 'chainermn_torus', '**', '*.py'), recursive=True):
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if ISSUE.search(line):
                    found.append(f'{os.path.relpath(path, ROOT)}:{number}: {line.strip()}')
    assert found == [], found
    assert ISSUE.search('(issue 73)') and ISSUE.search('Issues 5') and not \
        ISSUE.search('an issue with 3 ranks')
