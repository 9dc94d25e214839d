"""No shell function in scripts/ is named after a command: a function shadows the command of
its name for the rest of the script, so `install -d /run/munge` in scripts/slurm_cluster.sh
ran the script's own `install` (apt-get) and made nothing, on every machine where munge's
package had not made /run/munge before (issue 71).

The functions are found by bash's own parser: each script becomes the body of one function,
which is defined and never run, and `declare -f` prints every definition inside it in one
form, whichever way it was written (`f()`, `function f`, the brace on the next line)."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPTS = os.path.join(ROOT, 'scripts')
# Where CI's and a user's shells look, beside this process's PATH; the venv's bin (pip,
# mpiexec, python) is on the PATH of every job the scripts start.
STANDARD_PATH = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin']
VENV_BIN = os.path.dirname(sys.executable)
DEFINITION = re.compile(r'^\s*function (\S+) \(\) $\n^\s*\{ $', re.M)


def shell_scripts():
    """Every file under scripts/ that bash runs: named *.sh or starting with a bash or sh
    shebang (scripts/cluster_ssh)."""
    found = []
    for base, dirs, names in os.walk(SCRIPTS):
        dirs[:] = [d for d in dirs if d != '__pycache__']
        for name in names:
            path = os.path.join(base, name)
            with open(path, 'rb') as f:
                head = f.readline()
            if name.endswith('.sh') or re.match(rb'#!\s*\S*(/env\s+)?\S*\b(ba)?sh\b', head):
                found.append(path)
    return sorted(found)


def functions_in(path):
    """The names of the functions a bash script defines, at any depth."""
    wrap = 'eval "__script__() {$2$(cat "$1")$2}" && declare -f __script__'
    proc = subprocess.run(['bash', '--norc', '--noprofile', '-c', wrap, '_', path, '\n'],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, (path, proc.stderr)
    return [n for n in DEFINITION.findall(proc.stdout) if n != '__script__']


def shell_words():
    proc = subprocess.run(['bash', '--norc', '--noprofile', '-c', 'compgen -b; compgen -k'],
                          capture_output=True, text=True, timeout=30)
    return set(proc.stdout.split())


def clashes(paths):
    """(script, function, what it shadows) for each function named after a command on the
    PATH (this process's, the standard one, the venv's bin) or a bash builtin or keyword."""
    search = os.pathsep.join([os.environ.get('PATH', '')] + STANDARD_PATH + [VENV_BIN])
    words = shell_words()
    found = []
    for path in paths:
        for name in functions_in(path):
            where = 'a bash builtin or keyword' if name in words else \
                shutil.which(name, path=search)
            if where:
                found.append((os.path.relpath(path, ROOT), name, where))
    return found


def test_no_function_in_scripts_is_named_after_a_command():
    scripts = shell_scripts()
    assert os.path.join(SCRIPTS, 'slurm_cluster.sh') in scripts, scripts
    assert os.path.join(SCRIPTS, 'cluster_ssh') in scripts, scripts   # by its shebang
    # The parser sees the functions (a list that came back empty would pass anything).
    assert {'die', 'start_munge', 'up', 'down'} <= set(
        functions_in(os.path.join(SCRIPTS, 'slurm_cluster.sh')))
    found = clashes(scripts)
    assert not found, '\n'.join(
        '{}: function {}() shadows {}: rename it for what it does'.format(*c) for c in found)


@pytest.mark.parametrize('definition', [
    'install() {\n  apt-get install -y "$@"\n}\n',
    'function pip\n{\n  echo no\n}\n',
    'outer() {\n  test() { :; }\n}\n',
])
def test_a_function_named_after_a_command_is_found(tmp_path, definition):
    # Each way of writing a definition, nested too; `test` is a builtin as well as a file.
    script = tmp_path / 'clash.sh'
    script.write_text('#!/usr/bin/env bash\nset -euo pipefail\nexit 3\n' + definition)
    found = clashes([str(script)])
    assert len(found) == 1 and found[0][1] in ('install', 'pip', 'test'), found
