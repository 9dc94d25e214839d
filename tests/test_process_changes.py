"""What each call changes in a rank's process is what the README says (its table under "What
`import chainermn_torus` does"), read on 2 real ranks before and after (mpi_workers/
process_probe.py: the except hook, sys.exit, every signal's handler, the wakeup fd,
Trainer.run, child processes, the fault handler, malloc's keeping, the thread pools,
Chainer's functions, the FP environment); ``Setup.undo()`` puts back all of it; the steps run
once, in their order, said in one line."""
import json
import os
import re
import subprocess
import sys

import pytest

from chainermn_torus import process_setup
from chainermn_torus.compute.onednn import binding
from conftest import ROOT, job_env, mpiexec_path, pythonpath, worker

CASES = {'import': '`import chainermn_torus`', 'naive': "`create_communicator('naive')`",
         'rsap': "`create_communicator('rsap')`",
         'optimizer': '`create_multi_node_optimizer(',
         'launched': '`python -m chainermn_torus.run`'}


def _readme_rows():
    """{case: set of the probe's keys the README says change}."""
    text = open(os.path.join(ROOT, 'README.md')).read()
    start = text.index('| the script calls | what changes in its process |')
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith('|'):
            break
        call, changes = line.strip('|').split('|')[:2]
        case = [c for c, said in CASES.items() if call.strip().startswith(said)]
        assert len(case) == 1, line
        keys = set(re.findall(r'`([a-zA-Z. ]+)`', changes))
        if 'the same' in changes:
            keys |= rows['rsap']
        if ', but ' in changes:  # "but `threads`": left out
            keys -= set(re.findall(r'`([a-zA-Z. ]+)`', changes.split(', but ')[1]))
        rows[case[0]] = keys
    assert set(rows) == set(CASES), rows
    return rows


def _probe(tmp_path, case, launched=False, env=None):
    argv = [sys.executable] + (['-m', 'chainermn_torus.run'] if launched else []) + \
        [worker('process_probe.py'), case]
    # The libraries' own thread counts (a pool of 2 on 2 cores, which the budget of 1 a rank
    # changes) and only the settings the case gives.
    full = {k: v for k, v in job_env(2).items() if not k.startswith('CHAINERMN_TORUS_')
            and k not in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS')}
    out = tmp_path / (case + ('-launched' if launched else ''))
    out.mkdir()
    full.update(env or {}, PYTHONPATH=pythonpath(), PROBE_OUT=str(out))
    proc = subprocess.run([mpiexec_path(), '-n', '2'] + argv, capture_output=True, text=True,
                          timeout=180, env=full, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    states = {}
    for name in os.listdir(out):
        rank, when, _ = name.split('.')
        states[int(rank), when] = json.loads((out / name).read_text())
    assert {r for r, _ in states} == {0, 1}, proc.stdout[-2000:]
    return states


def _changed(a, b):
    return {k for k in a if a[k] != b[k] and k != 'python threads'}


def _pools_of(reference, state):
    """``state`` with only the thread pools ``reference`` has: a pool loaded since (oneDNN's
    OpenMP, numba's) starts at its library's own count, which is no change of ours."""
    pools = {p.split(':')[0] for p in reference['threads']}
    return dict(state, threads=[p for p in state['threads'] if p.split(':')[0] in pools])


def _expected(case, rows):
    keys = set(rows[case])
    if not binding.available():  # compute=auto: Chainer's own where oneDNN does not load
        keys.discard('chainer functions')
    return keys


@pytest.mark.parametrize('case', ['import', 'naive', 'rsap', 'optimizer'])
def test_each_call_changes_what_the_readme_says_and_undo_puts_it_back(tmp_path, case):
    rows = _readme_rows()
    states = _probe(tmp_path, case, env={'CHAINERMN_TORUS_WATCHDOG': '600'} if case == 'import'
                       else None)  # a watchdog set: the import still starts nothing
    for rank in (0, 1):
        before = states[rank, 'before']
        after = _pools_of(before, states[rank, 'after'])  # a pool loaded since: its own count
        assert _changed(before, after) == _expected(case, rows), (rank, before, after)
        if case == 'import':
            continue
        undone = _pools_of(before, states[rank, 'undone'])  # every pool's count back
        assert _changed(before, undone) == set(), (rank, before, undone)


def test_the_launcher_changes_what_the_readme_says_before_the_script(tmp_path):
    rows = _readme_rows()
    plain = _probe(tmp_path, 'launched')
    launched = _probe(tmp_path, 'launched', launched=True)
    for rank in (0, 1):
        assert _changed(plain[rank, 'at-start'], _pools_of(
            plain[rank, 'at-start'], launched[rank, 'at-start'])) == \
            _expected('launched', rows), rank


def test_chainermns_communicator_gets_the_hook_where_the_setting_asks(tmp_path):
    states = _probe(tmp_path, 'naive', env={'CHAINERMN_TORUS_ABORT_HOOK': 'on'})
    changed = _changed(states[0, 'before'], states[0, 'after'])
    assert {'excepthook', 'sys.exit', 'Trainer.run'} <= changed, changed
    assert 'malloc' not in changed and 'threads' not in changed, changed


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
    # every step this call asks for, in the order (one rank: no segment names to remove
    # that matter, no timeline, flush-to-zero or watchdog asked)
    assert steps == ['abort', 'settings', 'segment names', 'malloc', 'compute', 'threads'], \
        steps
    assert [s for s in process_setup.STEPS if s in steps] == steps
    assert same  # a second communicator configures nothing again
    assert len(said) == 1, said
    assert said[0].startswith('chainermn_torus: process: abort hook, '), said
    assert 'malloc keeps freed memory, compute ' in said[0], said
    assert 'threads 1; settings: threads=1 (CHAINERMN_TORUS_THREADS)' in said[0], said


@pytest.mark.parametrize('env, compute', [({}, False), ({'CHAINERMN_TORUS_COMPUTE': 'numpy'},
                                                        True)])
def test_chainermns_own_communicator_gets_only_what_a_setting_asks(env, compute):
    said, steps, _ = _run('naive', env)
    assert ('compute' in steps) is compute and 'threads' not in steps and \
        'malloc' not in steps and 'abort' not in steps, steps
    assert steps[0] == 'settings', steps
    assert len(said) == (1 if compute else 0), said  # nothing applied: nothing said
    assert not compute or 'compute numpy' in said[0], said
