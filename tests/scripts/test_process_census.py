"""scripts/process_census.py counts every process a command starts by kind and phase, from
the kernel's process accounting (root only), and tells the command a census is running."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = os.path.join(ROOT, 'scripts', 'process_census.py')
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason='process accounting (acct(2)) needs root: '
                                                 'run as root'),
    # One accounting file per machine: this test would end the census around the suite.
    pytest.mark.skipif(bool(os.environ.get('CHAINERMN_TORUS_PROCESS_CENSUS')),
                       reason='this suite runs under scripts/process_census.py, whose '
                              'accounting the test would switch off'),
]

# Half a second of CPU in a Python child, a phase line, then a shell tool in the next phase,
# 2 s apart: a record's end is known to the second. The child runs under a name of its own
# (its kernel name is the link's): accounting is machine-wide, and a CI lane beside this one
# runs Python children too; under that load the sampler may also miss the child's command
# line, and then its kind is the kernel's name, the same one.
BUSY = 'census-busy'
COMMAND = ('{busy} -c "import time\nt = time.process_time()\nwhile time.process_time() - t < '
           '0.5: pass"; sleep 2; echo "[test] second"; sleep 2; /bin/true; echo done')


@pytest.mark.slow  # full tier: a measuring tool's own check
def test_the_census_counts_each_process_in_the_phase_it_ended(tmp_path):
    out = tmp_path / 'census.json'
    busy_python = tmp_path / BUSY
    busy_python.symlink_to(sys.executable)
    proc = subprocess.run([sys.executable, SCRIPT, '--json', str(out), '--', 'bash', '-c',
                           COMMAND.format(busy=busy_python)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '[test] second' in proc.stdout  # the command's output passes through
    phases = json.loads(out.read_text())
    assert [p['phase'] for p in phases] == ['start', '[test] second'], phases
    first, second = (p['kinds'] for p in phases)
    busy = first.get(BUSY, {'processes': 0, 'user_s': 0, 'system_s': 0})
    # The accounting's times are sampled at the clock tick: on a loaded 2-core VM a loop of
    # 0.5 CPU-s (0.55 with the interpreter's start) was once recorded as 0.39 s.
    assert busy['processes'] == 1 and busy['user_s'] + busy['system_s'] >= 0.25, sorted(first)
    assert second.get('true', {}).get('processes', 0) >= 1, second
    assert 'true' not in first and phases[0]['busy_cpu_s'] >= 0.25, phases


def test_a_command_exit_code_is_returned_and_it_is_told_a_census_runs():
    proc = subprocess.run([sys.executable, SCRIPT, '--', 'bash', '-c',
                           'echo "census=$CHAINERMN_TORUS_PROCESS_CENSUS"; exit 3'],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert 'census=1' in proc.stdout, proc.stdout
