"""Timeline: phase times on every rank of a real MNIST run, merged into a Chrome trace."""
import json
import os
import subprocess
import sys
import time

import pytest

from chainermn_torus.runtime import timeline
from chainermn_torus.tools import timeline as timeline_tools
from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from conftest import ROOT, run_cli, run_mpi

EXAMPLE = os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py')


@pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist is not installed '
                           '(make setup installs it)')
@pytest.mark.example
@pytest.mark.parametrize('flags, comm_phases', [
    (['--communicator', 'rsap'], {'reduce (shm)', 'gather (shm)'}),
    (['--communicator', 'rsap', '--double-buffering'], {'reduce (shm)', 'wait'}),
    (['--communicator', 'pure_allreduce'], {'allreduce'}),
], ids=['rsap-shm', 'rsap-db', 'pure'])
def test_mnist_run_writes_a_trace_per_rank_and_merges(tmp_path, flags, comm_phases):
    prefix = str(tmp_path / 'tl')
    proc = run_mpi(2, [EXAMPLE, '--epoch', '1', '--limit', '1000', '--out', str(tmp_path),
                       '--timeline', prefix] + flags, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = timeline_tools.rank_files(prefix)
    assert [os.path.basename(f) for f in files.values()] == ['tl.rank0.json', 'tl.rank1.json']
    assert not list(tmp_path.glob('tl.rank*.events'))  # the complete files replaced the logs
    merged = timeline_tools.merge(prefix)['traceEvents']
    spans = [e for e in merged if e['ph'] == 'X']
    names = {e['name'] for e in spans}
    assert {'forward_backward', 'update'} | comm_phases <= names, names
    for rank in (0, 1):
        mine = [e for e in spans if e['pid'] == rank and e['name'] == 'forward_backward']
        # 1000 images / 2 ranks / batch 100 = 5 iterations, each recorded once, numbered.
        assert sorted(e['args']['iteration'] for e in mine) == [1, 2, 3, 4, 5], mine
        assert all(e['dur'] > 0 for e in mine)
    if '--double-buffering' in flags:
        # The all-reduce runs on the communication thread: its own row in the trace.
        assert {e['tid'] for e in spans if e['name'] == 'reduce (shm)'} == {1}
    out = tmp_path / 'trace.json'
    png = tmp_path / 'tl.png'
    cli = [sys.executable, '-m', 'chainermn_torus.tools.cli', 'timeline']
    for args, path in ((['merge', prefix, '-o', str(out)], out),
                       (['plot', prefix, '-o', str(png), '--first', '2'], png)):
        p = subprocess.run(cli + args, capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert p.returncode == 0 and path.stat().st_size > 1000, p.stderr
    assert len(json.loads(out.read_text())['traceEvents']) == len(merged)


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_timeline_bad_input(tmp_path):
    with pytest.raises(ValueError, match='must be a path in a writable directory.*does not exist'):
        timeline.enable(str(tmp_path / 'missing' / 'tl'))
    with pytest.raises(ValueError, match='no timeline files'):
        timeline_tools.rank_files(str(tmp_path / 'nothing'))
    p = subprocess.run([sys.executable, '-m', 'chainermn_torus.tools.cli', 'timeline', 'plot',
                        str(tmp_path / 'nothing'), '-o', str(tmp_path / 'x.png')],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 2 and 'no timeline files' in p.stderr
    # --count 0 was "no recorded phases in iterations 2..1"; an unwritable -o was found
    # after the merge
    for args, said in ((['plot', 'x', '-o', 'x.png', '--count', '0'],
                        "argument --count: must be an integer >= 1, got '0'"),
                       (['merge', str(tmp_path / 'nothing'), '-o', '/nowhere/t.json'],
                        'cannot write -o /nowhere/t.json: directory /nowhere does not exist')):
        p = run_cli(['timeline'] + args)
        assert p.returncode == 2 and said in p.stderr, p.stderr
    # Only an unfinished file (a kill -9 while writing), or a file that is not a timeline.
    (tmp_path / 'cut.rank0.json.tmp').write_text('{"traceEvents": [')
    with pytest.raises(ValueError, match='only 1 unfinished one.*killed while writing'):
        timeline_tools.rank_files(str(tmp_path / 'cut'))
    (tmp_path / 'bad.rank0.json').write_text('{"traceEvents": [')
    with pytest.raises(ValueError, match='bad.rank0.json is not a timeline file'):
        timeline_tools.merge(str(tmp_path / 'bad'))
    # One garbled log beside a good file: named, the rest merged (it failed on a UTF-8
    # error naming no file, issue 34).
    (tmp_path / 'mix.rank0.json').write_text('{"traceEvents": [{"name": "update", "ph": "X", '
                                             '"ts": 1, "dur": 2, "pid": 0, "tid": 0}]}')
    (tmp_path / 'mix.rank1.events').write_bytes(b'\xff\xfe\x00garbage\n\xff')
    notes = []
    trace = timeline_tools.merge(str(tmp_path / 'mix'), notes)
    assert [e['name'] for e in trace['traceEvents']] == ['update']
    assert len(notes) == 1 and notes[0].startswith('rank 1: skipped: ') and \
        'mix.rank1.events is not a timeline log' in notes[0], notes


FAULT_JOB = os.path.join(ROOT, 'tests', 'mpi_workers', 'fault_job.py')


@pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist is not installed '
                           '(make setup installs it)')
@pytest.mark.example  # two training jobs: full tier
@pytest.mark.parametrize('fault', ['raise', 'kill'])
def test_timelines_survive_an_abort_and_kill_9(tmp_path, fault):
    # raise: rank 1 writes its whole file before MPI_Abort, which kills rank 0 without one;
    # kill: rank 1 dies by SIGKILL, then mpiexec ends rank 0. Both leave their streamed logs
    # with the steps before the fault, and merge says whose files are cut short.
    prefix = str(tmp_path / 'tl')
    proc = run_mpi(2, [FAULT_JOB, fault, 'pure_allreduce', 'serial', str(tmp_path / 'ck')],
                   timeout=120, env={'CHAINERMN_TORUS_TIMELINE': prefix,
                                     'FAULT_STEP_SLEEP': '0.3'})
    assert proc.returncode != 0 and 'FAULT' in proc.stdout, proc.stdout + proc.stderr[-2000:]
    files = timeline_tools.rank_files(prefix)
    assert sorted(files) == [0, 1], files
    expected = {'raise': ['.events', '.json'], 'kill': ['.events', '.events']}[fault]
    assert [os.path.splitext(files[r])[1] for r in (0, 1)] == expected, files
    notes = []
    merged = timeline_tools.merge(prefix, notes)['traceEvents']
    cut = [r for r in (0, 1) if files[r].endswith('.events')]
    assert [n.split(' (')[0] for n in notes] == [f'rank {r}' for r in cut], notes
    assert all('cut short at iteration' in n for n in notes), notes
    for rank in (0, 1):
        steps = {e['args']['iteration'] for e in merged
                 if e.get('ph') == 'X' and e['pid'] == rank and e['name'] == 'update'}
        # The fault comes after step 5; streamed every 0.5 s with steps of 0.3 s or more,
        # at most the last second is missing.
        assert {2, 3} <= steps, (rank, sorted(steps))
    p = subprocess.run([sys.executable, '-m', 'chainermn_torus.tools.cli', 'timeline',
                        'merge', prefix, '-o', str(tmp_path / 'trace.json')],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 0 and 'cut short at iteration' in p.stderr, p.stderr
    # A rank with no file at all is named from the others' headers.
    os.remove(files[cut[0]])
    if fault == 'kill':
        notes = []
        timeline_tools.merge(prefix, notes)
        assert notes[0].startswith(f'rank(s) {cut[0]} of 2 have no timeline file'), notes


def test_phases_cost_nothing_when_off():
    timeline.disable()
    with timeline.phase('allreduce') as p:
        assert p is timeline._NULL
    assert timeline.flush() is None


def test_timed_adds_to_the_stats_and_the_timeline_from_the_same_readings(tmp_path):
    stats = {'update': 0.0, 'calls': 0, 'communicate': 0.0}
    timeline.disable()
    with timeline.timed('update', stats, count='calls'):
        time.sleep(0.01)
    assert stats['update'] >= 0.01 and stats['calls'] == 1
    timeline.enable(str(tmp_path / 'tl'))
    try:
        tl = timeline.active()
        before = stats['update']
        with pytest.raises(KeyError):
            with timeline.timed('update', stats):
                raise KeyError('counted also when the block raises')
        name, t0, t1 = tl.events[-1][:3]
        assert name == 'update' and stats['update'] - before == pytest.approx(t1 - t0)
        with timeline.timed(None, stats, 'communicate'):  # counted, not drawn
            pass
        assert tl.events[-1][0] == 'update' and stats['communicate'] > 0
    finally:
        timeline.disable()
