"""The process is configured in one place (process_setup), once, in its stated order, and rank
0 says in one line what was applied and which settings a flag or variable gave."""
import os
import subprocess
import sys

import pytest

from chainermn_torus import process_setup
from conftest import ROOT, pythonpath

SCRIPT = '''
import chainermn_torus, chainermn
from chainermn_torus import process_setup
comm = chainermn.create_communicator({name!r})
done = process_setup.applied()
print('STEPS', ','.join(step for step in process_setup.STEPS if step in done))
again = chainermn.create_communicator({name!r})
print('SAME', process_setup.applied().keys() == done.keys())
'''


def _run(name, env):
    full = dict(os.environ, PYTHONPATH=pythonpath(), **env)
    full.pop('CHAINERMN_TORUS_QUIET', None)
    proc = subprocess.run([sys.executable, '-c', SCRIPT.format(name=name)], cwd=ROOT,
                          env=full, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    said = [ln for ln in lines if ln.startswith('chainermn_torus: process: ')]
    steps = [ln.split(' ', 1)[1].split(',') for ln in lines if ln.startswith('STEPS')][0]
    return said, steps, 'SAME True' in lines


def test_our_communicator_configures_each_step_once_and_says_it_in_one_line():
    said, steps, same = _run('rsap', {'CHAINERMN_TORUS_THREADS': '1'})
    assert steps == list(process_setup.STEPS), steps  # every step, in the order
    assert same  # a second communicator configures nothing again
    assert len(said) == 1, said
    assert said[0].startswith('chainermn_torus: process: abort hook, segment names removed, '
                              'malloc keeps freed memory, compute '), said
    assert 'threads 1; settings: threads=1 (CHAINERMN_TORUS_THREADS)' in said[0], said


@pytest.mark.parametrize('env, compute', [({}, False), ({'CHAINERMN_TORUS_COMPUTE': 'numpy'},
                                                        True)])
def test_chainermns_own_communicator_gets_only_what_a_setting_asks(env, compute):
    said, steps, _ = _run('naive', env)
    assert ('compute' in steps) is compute and 'threads' not in steps and \
        'malloc' not in steps, steps
    assert steps[:2] == ['abort', 'settings'] and len(said) == 1, (steps, said)
    assert ('compute numpy' in said[0]) is compute, said
