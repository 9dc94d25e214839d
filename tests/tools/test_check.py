"""``chainermn-torus check``: one line per fact of this install, a non-zero exit where a job
cannot run (here: a launcher of another MPI than the one mpi4py loads), and --json."""
import json
import os
import stat
import subprocess
import sys

from chainermn_torus.tools.check import mpi_family
from conftest import ROOT


def run_cli(argv, env=None):
    # A process of its own: the command loads MPI without starting it, which must not be
    # this test process's MPI.
    return subprocess.run([sys.executable, '-m', 'chainermn_torus.tools.cli'] + argv,
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)


def _activated():
    # As `. .venv/bin/activate` leaves it: the venv's mpiexec first (a system MPI's may be
    # on the PATH too: Debian's Open MPI, for the cluster recipe's test).
    here = os.path.dirname(sys.executable)
    return dict(os.environ, PATH=f'{here}{os.pathsep}{os.environ["PATH"]}')


def test_this_install_is_mpich_with_its_own_launcher_and_everything_a_job_needs():
    proc = run_cli(['check', '--json'], env=_activated())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = {r['name']: r for r in json.loads(proc.stdout)}
    assert list(found)[:3] == ['mpi4py', 'MPI library', 'launcher']
    assert mpi_family(found['MPI library']['value']) == 'MPICH'
    assert found['launcher']['status'] == 'ok' and 'mpiexec' in found['launcher']['value']
    assert found['Chainer']['value'] == '7.8.1' and found['numpy']['status'] == 'ok'
    assert 'rsap' in found['communicators']['value']
    assert all(r['status'] in ('ok', '--') for r in found.values()), found


def test_a_launcher_of_another_mpi_is_refused_naming_both(tmp_path):
    fake = tmp_path / 'mpiexec'
    fake.write_text('#!/bin/sh\necho "mpiexec (OpenRTE) 4.1.4"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = _activated()
    env['PATH'] = f'{tmp_path}{os.pathsep}{env["PATH"]}'
    proc = run_cli(['check'], env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if 'launcher' in ln]
    assert line.startswith('NO') and 'OpenRTE) 4.1.4' in line, line
    assert 'the launcher is Open MPI and mpi4py loads MPICH' in line, line


def test_mpi_families_from_their_version_texts():
    assert mpi_family('Open MPI v4.1.4, package: Debian OpenMPI') == 'Open MPI'
    assert mpi_family('Intel(R) MPI Library 2021.10 for Linux*') == 'Intel MPI'
    assert mpi_family('MPICH Version:      5.0.2') == 'MPICH'
    assert mpi_family('something else') is None and mpi_family(None) is None
