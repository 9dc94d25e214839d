"""The public API's type hints (mypy.ini: the factories, init and its Setup, the settings, the
communicators' constructor, the multi-node optimizer) are complete and consistent by mypy;
and the check can fail."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

MYPY = os.path.join(os.path.dirname(sys.executable), 'mypy')
needs_mypy = pytest.mark.skipif(not os.path.exists(MYPY) and shutil.which('mypy') is None,
                                reason='mypy is not installed (make setup installs it)')


def _mypy(*args):
    exe = MYPY if os.path.exists(MYPY) else shutil.which('mypy')
    return subprocess.run([exe, '--config-file', os.path.join(ROOT, 'mypy.ini')] + list(args),
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


@needs_mypy
def test_the_public_api_is_typed_and_checks():
    proc = _mypy()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert 'no issues found in 5 source files' in proc.stdout, proc.stdout


@pytest.mark.slow  # full tier: one more mypy start
@needs_mypy
def test_the_check_finds_a_missing_hint_and_a_wrong_type(tmp_path):
    bad = tmp_path / 'bad.py'
    bad.write_text('def f(x):\n    return x\n\n\ndef g(n: int) -> str:\n    return n\n')
    proc = _mypy(str(bad))
    assert proc.returncode == 1
    assert 'no-untyped-def' in proc.stdout and 'return-value' in proc.stdout, proc.stdout
