"""`import chainermn_torus` registers names and nothing else; MPI, numba, the abort hook and
the timeline start with the first communicator or optimizer; login-node commands never
start MPI; imported before Chainer, Chainer's environment check scans nothing where it has
nothing to find (runtime.chainer_glue.chainer_import). Each check runs in a fresh interpreter, since
this one has imported everything."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT, pythonpath, run_mpi


def python(code, env=None):
    full = dict(os.environ, PYTHONPATH=pythonpath(), CHAINERMN_TORUS_QUIET='1')
    full.update(env or {})
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=full)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_import_loads_no_mpi_no_numba_and_installs_nothing():
    out = python('''
import sys
hook = sys.excepthook
import chainermn, chainermn_torus
assert chainermn.create_communicator is chainermn_torus.create_communicator
tl = sys.modules.get('chainermn_torus.runtime.timeline')
print(sorted(m for m in ('mpi4py.MPI', 'numba', 'chainermn_torus.communicators.rsap')
             if m in sys.modules) + (['a timeline started'] if tl and tl.active() else []))
print(sys.excepthook is hook)
print(chainermn_torus.RsapCommunicator.__name__, 'mpi4py.MPI' in sys.modules)
''')
    assert out.split('\n')[:3] == ['[]', 'True', 'RsapCommunicator True']


SCANS = '''
import sys
import chainermn_torus
import chainer
from chainermn_torus.runtime.chainer_glue import patches
print(sorted(m for m in ('pkg_resources', 'numpy.distutils', 'chainer._environment_check')
             if m in sys.modules), hasattr(chainer, '_environment_check'),
      len(patches.applied('chainer import')))
import chainer._environment_check as check  # Chainer's own module, from its file
print(check.__file__ == chainer.__file__.replace('__init__', '_environment_check'))
'''


def test_chainer_imported_after_us_scans_nothing_and_is_left_as_chainer_has_it():
    # Neither cupy nor ideep4py can be imported here: nothing to find, nothing scanned; the
    # stand-in gone from sys.modules and from Chainer's namespace, no patch left in force.
    assert python(SCANS).split('\n')[:2] == ['[] False 0', 'True']


def test_chainers_check_runs_where_an_optional_package_is_there(tmp_path):
    # An ideep4py that can be found (and fails to import, as a broken install would: Chainer
    # takes that as "no iDeep"): Chainer's check runs (its module's imports show it).
    (tmp_path / 'ideep4py').mkdir()
    (tmp_path / 'ideep4py' / '__init__.py').write_text('raise ImportError("a test\'s stand-in")\n')
    out = python(SCANS, env={'PYTHONPATH': pythonpath(str(tmp_path))})
    assert out.split('\n')[:2] == ["['numpy.distutils', 'pkg_resources'] False 0", 'True']


def test_what_the_check_could_find(monkeypatch):
    from chainermn_torus.runtime.chainer_glue import chainer_import, chainer_private
    monkeypatch.setattr(chainer_private, 'optional_dependencies',
                        lambda: [{'packages': ['numpy-cuda120']}, {'packages': ['nowhere4py']}])
    assert chainer_import._something_to_find()  # numpy-cuda120 provides ``numpy``
    monkeypatch.setattr(chainer_private, 'optional_dependencies',
                        lambda: [{'packages': ['nowhere4py', 'nowhere-cuda1']}])
    assert not chainer_import._something_to_find()
    monkeypatch.setattr(sys, 'platform', 'darwin')  # the check's BLAS warning: always runs
    assert chainer_import._something_to_find()
    monkeypatch.setattr(sys, 'platform', 'linux')

    def moved():  # another Chainer, without the list: its own check runs
        raise AttributeError("module 'chainer._version' has no attribute "
                             "'_optional_dependencies'")
    monkeypatch.setattr(chainer_private, 'optional_dependencies', moved)
    assert chainer_import._something_to_find()


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_a_bad_timeline_prefix_fails_at_the_communicator_not_at_import(tmp_path):
    bad = str(tmp_path / 'missing-dir' / 'tl')
    out = python('''
import chainermn, chainermn_torus
print('imported')
try:
    chainermn.create_communicator('pure_allreduce')
except ValueError as e:
    print('at creation:', 'does not exist' in str(e))
''', env={'CHAINERMN_TORUS_TIMELINE': bad})
    assert out.split('\n')[:2] == ['imported', 'at creation: True'], out


def test_jobscript_dry_run_starts_no_mpi():
    out = python('''
import sys
from chainermn_torus.tools import cli
cli.main(['jobscript', '--system', 'slurm', '--nodes', '2', '--ranks-per-node', '4',
          '--grid', '4x2', '--dry-run', '--', 'python', 'train.py'])
print('MPI loaded:', 'mpi4py.MPI' in sys.modules, 'numba' in sys.modules)
''')
    assert out.strip().endswith('MPI loaded: False False'), out


@pytest.mark.slow
def test_abort_hook_chains_a_hook_installed_before_it():
    # Rank 1 raises after an earlier hook of the script's own was installed: that hook runs,
    # then ours ends the job naming the rank (no rank waits in the barrier).
    script = os.path.join(ROOT, 'tests', 'mpi_workers', 'chained_hook.py')
    proc = run_mpi(2, [script], timeout=120)
    assert proc.returncode != 0
    assert 'EARLIER HOOK rank 1: ValueError' in proc.stderr, proc.stderr[-3000:]
    assert 'Uncaught exception on rank 1' in proc.stderr and 'boom' in proc.stderr


@pytest.mark.slow
def test_launcher_installs_the_abort_hook_for_a_script_using_naive():
    # An unchanged ChainerMN script with ChainerMN's own communicator: the launcher is where
    # the hook starts, as importing chainermn_torus once did.
    proc = run_mpi(2, ['-m', 'chainermn_torus.run', os.path.join(
        ROOT, 'tests', 'mpi_workers', 'naive_raises.py')], timeout=120)
    assert proc.returncode != 0
    assert 'Uncaught exception on rank 1' in proc.stderr, proc.stderr[-3000:]
    assert 'OK rank 0 reached the barrier' not in proc.stdout


def test_library_code_never_imports_the_command_line_tools():
    # tools/ (cli, jobscript, timeline merge/plot, calibrate's command) sits on top of the
    # library, never under it; the two documented old paths are the only shims.
    import re
    package = os.path.join(ROOT, 'chainermn_torus')
    offenders = []
    for base, _, files in os.walk(package):
        rel = os.path.relpath(base, package)
        if rel.split(os.sep)[0] in ('tools', 'bench'):
            continue
        for name in files:
            if name.endswith('.py') and not (rel == '.' and name == 'cli.py'):
                text = open(os.path.join(base, name)).read()
                if re.search(r'^\s*(from chainermn_torus\.tools\b|import chainermn_torus\.tools|'
                             r'from chainermn_torus import .*\btools\b)', text, re.M):
                    offenders.append(os.path.join(rel, name))
    assert not offenders, offenders
