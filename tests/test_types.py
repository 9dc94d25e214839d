"""The public API's type hints (mypy.ini: the factories, init and its Setup, the settings,
the communicators' constructors, the engine, the multi-node optimizer) are complete and
consistent by mypy;
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
def test_the_public_api_is_typed_and_checks_and_the_check_can_fail(tmp_path):
    # One mypy run (a start costs seconds): the configured modules beside a file with a
    # missing hint and a wrong type; only the latter's two findings.
    import configparser
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, 'mypy.ini'))
    modules = [f.strip() for f in parser['mypy']['files'].split(',')]
    assert len(modules) == 9, modules
    bad = tmp_path / 'bad.py'
    bad.write_text('def f(x):\n    return x\n\n\ndef g(n: int) -> str:\n    return n\n')
    proc = _mypy(*(modules + [str(bad)]))
    found = [ln for ln in proc.stdout.splitlines() if ': error: ' in ln]
    assert proc.returncode == 1 and len(found) == 2, proc.stdout[-4000:] + proc.stderr
    assert all(ln.startswith(str(bad)) for ln in found), found
    assert 'no-untyped-def' in found[0] and 'return-value' in found[1], found
    assert 'checked 10 source files' in proc.stdout, proc.stdout
