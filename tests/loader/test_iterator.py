"""LoaderIterator: SerialIterator's semantics, resume, errors, pinning and clean shutdown."""
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import chainer
import numpy
import psutil
import pytest

from chainermn_torus.loader import LoaderError, LoaderIterator
from chainermn_torus.loader.iterator import SHM_PREFIX
from chainermn_torus.runtime.files.devshm import job_tag
from chainermn_torus.watchers import processes
from conftest import pythonpath
from loader_support import Big, Failing, Ragged, Slow, Squares, Stuck

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)


def sampler(seed=3):
    return chainer.iterators.ShuffleOrderSampler(numpy.random.RandomState(seed))


def labels(batch):
    return [int(example[1]) for example in batch]


def state(it):
    return (it.epoch, it.epoch_detail, it.previous_epoch_detail, it.is_new_epoch,
            it.current_position)


def our_shm():
    return [n for n in os.listdir('/dev/shm') if n.startswith(SHM_PREFIX)]


@pytest.mark.parametrize('kwargs', [
    pytest.param({'order_sampler': None, 'shuffle': False}, marks=pytest.mark.slow),
    pytest.param({'order_sampler': 'seeded'}, marks=pytest.mark.slow)],
                         ids=['in-order', 'shuffled'])
def test_same_batches_and_epochs_as_serial_iterator(kwargs):
    def make(cls, **extra):
        kw = dict(kwargs)
        if kw.get('order_sampler') == 'seeded':
            kw['order_sampler'] = sampler()
        return cls(Squares(23), 5, **dict(kw, **extra))
    ref = make(chainer.iterators.SerialIterator)
    with make(LoaderIterator, n_processes=2, n_prefetch=3) as it:
        for _ in range(14):  # three epochs of 23 examples in batches of 5
            a, b = ref.next(), it.next()
            assert labels(a) == labels(b) and state(ref) == state(it)
            for (xa, _), (xb, _) in zip(a, b):
                assert numpy.array_equal(xa, xb)


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_finite_iteration_stops_like_serial_iterator():
    ref = chainer.iterators.SerialIterator(Squares(12), 5, repeat=False, shuffle=False)
    with LoaderIterator(Squares(12), 5, repeat=False, shuffle=False) as it:
        assert [labels(b) for b in it] == [labels(b) for b in ref] == [
            [0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11]]
        it.reset()
        assert labels(it.next()) == [0, 1, 2, 3, 4] and it.epoch == 0


def _snapshot(iterator):
    s = chainer.serializers.DictionarySerializer()
    iterator.serialize(s)
    return s.target


def _load(iterator, target):
    iterator.serialize(chainer.serializers.NpzDeserializer(target))


@pytest.mark.parametrize('source,dest', [
    ('loader', 'loader'), pytest.param('serial', 'loader', marks=pytest.mark.slow),
    pytest.param('loader', 'serial', marks=pytest.mark.slow)])
def test_resume_continues_exactly(source, dest):
    make = {'loader': lambda: LoaderIterator(Squares(23), 5, order_sampler=sampler(),
                                             n_processes=2),
            'serial': lambda: chainer.iterators.SerialIterator(Squares(23), 5,
                                                               order_sampler=sampler())}
    ref = chainer.iterators.SerialIterator(Squares(23), 5, order_sampler=sampler())
    first = make[source]()
    for _ in range(7):  # into the second epoch, prefetched batches in flight
        assert labels(ref.next()) == labels(first.next())
    saved = _snapshot(first)
    # The resumed iterator starts elsewhere (another sampler) and must follow the snapshot.
    second = {'loader': lambda: LoaderIterator(Squares(23), 5, order_sampler=sampler(99)),
              'serial': lambda: chainer.iterators.SerialIterator(
                  Squares(23), 5, order_sampler=sampler(99))}[dest]()
    second.next()
    _load(second, saved)
    assert state(second) == state(ref)
    # To the end of the epoch: the next epoch's order comes from the order sampler's random
    # state, which SerialIterator's snapshots do not hold either.
    for _ in range(2):
        assert labels(ref.next()) == labels(second.next()) and state(ref) == state(second)
    for it in (first, second):
        if isinstance(it, LoaderIterator):
            it.finalize()


def test_loader_exception_reaches_the_training_process_with_its_traceback():
    it = LoaderIterator(Failing(20), 4, shuffle=False)
    it.next()
    with pytest.raises(LoaderError) as e:
        it.next()  # examples 4-7
    msg = str(e.value)
    assert 'bad example 7 (raised on purpose)' in msg and 'Traceback' in msg
    assert 'loader_support.py' in msg and 'example batch [4, 5, 6, 7]' in msg
    assert not our_shm_of(it) and all(not p.is_alive() for p in it.processes)


def our_shm_of(it):
    return [n for n in our_shm() if any(n == s.lstrip('/') for s in it.shm_names)]


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_examples_of_another_shape_are_refused_clearly():
    with LoaderIterator(Ragged(10), 10, shuffle=False) as it:
        with pytest.raises(LoaderError) as e:
            it.next()
    assert 'example 5 has shape (3, 5, 4)' in str(e.value)
    assert 'needs examples of one shape' in str(e.value)


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_a_killed_loader_is_reported_with_the_example_it_was_loading(monkeypatch):
    # Before: a loader OOM-killed while decoding a 13,000 x 13,000 JPEG said "was killed by
    # signal 9 (SIGKILL)", naming neither the image nor the memory. The OOM killer is
    # stood in for by a SIGKILL and a rise of the node's OOM count (processes.oom_kills).
    it = LoaderIterator(Stuck(200), 10, shuffle=False, n_prefetch=1, n_processes=1)
    it.next()  # examples 0-9; the loader then sits in example 13
    deadline = time.monotonic() + 30
    while it._decoding[0] != 14 and time.monotonic() < deadline:
        time.sleep(0.01)
    before = it._oom_before
    monkeypatch.setattr(processes, 'oom_kills', lambda: (before or 0) + 1)
    it._oom_before = before or 0
    os.kill(it.processes[0].pid, signal.SIGKILL)
    with pytest.raises(LoaderError) as e:
        for _ in range(30):
            it.next()
    text = str(e.value)
    assert "was killed by signal 9 (SIGKILL), by the kernel's OOM killer: out of memory" in \
        text and ', while loading example 13 (/data/train/image13.JPEG); the job ends' in \
        text and text.count('\n') == 0, text


def test_a_loader_that_dies_before_its_next_task_is_reported_not_a_broken_pipe():
    # The race the fault matrix met: the loader died after the last look at the processes
    # and before the next task was handed to it (a write into a pipe nobody reads). Here
    # the look is passed by hand: the batches in flight are forgotten, so the next fill
    # sends at once.
    it = LoaderIterator(Squares(100), 10, shuffle=False, n_prefetch=1)
    try:
        it.next()
        proc = it.processes[0]
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=10)
        it._pending.clear()
        it._free.extend(range(len(it._arrays)))
        with pytest.raises(LoaderError) as e:
            it._fill()
        assert re.search(r'loader process \S+ \(pid \d+\) of this process '
                         rf'\({re.escape(socket.gethostname())}\) was killed '
                         r'by signal 9 \(SIGKILL\)',
                         str(e.value))
    finally:
        it.finalize()


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_loaders_are_pinned_and_everything_is_freed():
    cpus = sorted(os.sched_getaffinity(0))[:1]
    it = LoaderIterator(Squares(30), 6, n_processes=2, cpus=cpus)
    it.next()
    procs = [psutil.Process(p.pid) for p in it.processes]
    deadline = time.time() + 30  # each loader pins itself as soon as its interpreter is up
    while time.time() < deadline and not all(p.cpu_affinity() == cpus for p in procs):
        time.sleep(0.1)
    assert all(p.cpu_affinity() == cpus for p in procs)
    names = list(it.shm_names)
    # Named for the job and process, and unlinked as soon as every loader has mapped them:
    # batches keep flowing through the mappings, and no name is left for a crash to leak.
    assert all(n.lstrip('/').startswith(f'cmtorus_{job_tag()}_{os.getpid()}_')
               for n in names), names
    assert not any(os.path.exists('/dev/shm/' + n.lstrip('/')) for n in names)
    assert len(it.next()) == 6
    it.finalize()
    it.finalize()  # idempotent
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)
    assert not any(os.path.exists('/dev/shm/' + n.lstrip('/')) for n in names)
    assert it.finalized


def test_a_finalized_iterator_used_again_starts_its_loaders_anew():
    # Chainer's Trainer finalizes the Evaluator's iterators when training ends; the
    # examples' final evaluation then reset the launcher's --loader-eval iterator: an
    # IndexError and no test accuracy. As Chainer's MultiprocessIterator, it starts again.
    ref = chainer.iterators.SerialIterator(Squares(12), 5, repeat=False, shuffle=False)
    it = LoaderIterator(Squares(12), 5, repeat=False, shuffle=False)
    mine = []
    try:
        first = [labels(b) for b in it]
        old = [p.pid for p in it.processes]
        mine += it.shm_names
        it.finalize()
        assert it.finalized and not set(our_shm()) & set(mine)
        it.reset()  # the evaluator's reset after training
        assert not it.finalized and [p.pid for p in it.processes] != old
        assert [labels(b) for b in it] == first == [labels(b) for b in ref]
        it.reset()
        mine += it.shm_names
        it.finalize()
        assert labels(it.next()) == [0, 1, 2, 3, 4]  # next() alone starts them too
        mine += it.shm_names
    finally:
        it.finalize()
    assert not set(our_shm()) & set(mine)  # this iterator's; other tests' are theirs


@pytest.mark.slow
def test_nothing_remains_after_the_training_process_is_killed():
    script = textwrap.dedent('''
        import os, signal, sys
        sys.path.insert(0, {tests!r})
        from loader_support import Squares
        from chainermn_torus.loader import LoaderIterator
        if __name__ == '__main__':
            it = LoaderIterator(Squares(50), 5, n_processes=2)
            it.next()
            print(' '.join(str(p.pid) for p in it.processes), flush=True)
            print(' '.join(it.shm_names), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)   # a crash: no finalize, no atexit
    ''').format(tests=TESTS)
    proc = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=pythonpath()))
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pids_line, names_line = proc.stdout.splitlines()[:2]
    pids = [int(p) for p in pids_line.split()]
    names = names_line.split()
    deadline = time.time() + 15
    while time.time() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        left = [n for n in names if os.path.exists('/dev/shm/' + n.lstrip('/'))]
        if not alive and not left:
            break
        time.sleep(0.2)
    assert not alive, f'loader processes outlived the training process: {alive}'
    assert not left, f'shared memory left behind: {left}'


def _dead_pid():
    # Above the kernel's largest pid: no process has it, and none can come to have it (a
    # child's pid, once it exited, could be a new process's by the sweep on a busy machine).
    with open('/proc/sys/kernel/pid_max') as f:
        return int(f.read()) + 1


def test_a_start_sweeps_what_dead_processes_left_and_nothing_else(tmp_path):
    # A job killed in the second between creating its segments and its loaders mapping them
    # leaves named segments: the next loader on the node removes them (pid gone), never a
    # live process's, and `chainermn-torus clean` does the same by hand.
    dead = f'/dev/shm/cmtorus_nojob_{_dead_pid()}_0_abcdef_0_0'
    live = f'/dev/shm/cmtorus_nojob_{os.getpid()}_0_abcdef_0_0'
    foreign = '/dev/shm/cmtorus-not-ours'
    for path in (dead, live, foreign):
        with open(path, 'wb') as f:
            f.write(b'x' * 4096)
    try:
        it = LoaderIterator(Squares(10), 2, n_processes=1)
        it.finalize()
        assert not os.path.exists(dead) and os.path.exists(live) and os.path.exists(foreign)
        with open(dead, 'wb') as f:
            f.write(b'x')
        from conftest import run_cli
        proc = run_cli(['clean', '--dry-run'])
        assert proc.returncode == 0 and 'would remove ' + os.path.basename(dead) in proc.stdout
        assert os.path.exists(dead)
        proc = run_cli(['clean'])
        assert 'removed ' + os.path.basename(dead) in proc.stdout, proc.stdout
        assert 'is gone' in proc.stdout and os.path.basename(live) not in proc.stdout
        assert not os.path.exists(dead) and os.path.exists(live)
    finally:
        for path in (dead, live, foreign):
            if os.path.exists(path):
                os.remove(path)


def test_a_full_dev_shm_is_named_before_anything_is_allocated():
    from chainermn_torus.runtime.files import devshm
    free = devshm.free_bytes()
    size = 1 << 20
    batch = free // (4 * size) + 1  # 4 slots (n_prefetch 2 + 2) of batch x 1 MB > free
    with pytest.raises(devshm.SharedMemoryFull) as e:
        LoaderIterator(Big(size), int(batch), n_processes=1)
    text = str(e.value)
    assert '/dev/shm on node' in text and 'free' in text and 'Bus error' in text, text
    assert "loader's 4 batch slots" in text and 'chainermn-torus clean' in text


def test_bad_arguments():
    with pytest.raises(ValueError) as e:
        LoaderIterator(Squares(5), 0)
    assert 'must be >= 1' in str(e.value)
    with pytest.raises(ValueError) as e:
        LoaderIterator(Squares(0), 2)
    assert 'empty' in str(e.value)


@pytest.mark.parametrize('limit', [1.0])
def test_a_stopped_loader_is_named_within_the_limit(limit):
    # Before: a stopped loader was caught only by the watchdog's outside-a-call limit (10x the
    # step limit: 31 s at 3 s) and said as "the job waits for none".
    it = LoaderIterator(Slow(200), 10, shuffle=False, n_prefetch=1, timeout=limit)
    try:
        it.next()
        pid = it.processes[0].pid
        os.kill(pid, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(LoaderError) as e:
            for _ in range(200):
                it.next()
        waited = time.monotonic() - start
        assert waited < limit + 2, waited
        assert re.search(rf'loader process \S+ \(pid {pid}\) of this process '
                         rf'\({re.escape(socket.gethostname())}\) has been stopped '
                         r'\(process state T.* for \d\.\d s, the loader\'s timeout; the job '
                         r'ends', str(e.value)), \
            str(e.value)
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    finally:
        it.finalize()


@pytest.mark.slow  # full tier only: one loader process
def test_a_segment_name_another_user_made_first_is_passed_over(monkeypatch):
    # Before: a name taken in /dev/shm (sticky: the job cannot remove another user's file)
    # stopped the loader with FileExistsError; now the next token is taken.
    import itertools
    from chainermn_torus.loader import iterator
    from chainermn_torus.runtime.files import devshm, shared_paths
    from tests.other_user import as_other
    monkeypatch.setattr(iterator, '_COUNTER', itertools.count(777))
    tokens = itertools.chain(['0badc0ffee00'], iter(shared_paths.token, None))
    monkeypatch.setattr(shared_paths, 'token', lambda: next(tokens))
    taken = f'/dev/shm/{devshm.segment_prefix()}777_0_0_0badc0ffee00'
    def plant():
        os.close(os.open(taken, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    as_other(plant) if os.getuid() == 0 else plant()
    try:
        with LoaderIterator(Squares(20), 10, shuffle=False) as it:
            x, t = chainer.dataset.concat_examples(it.next())
        assert t.tolist() == list(range(10)) and os.path.exists(taken)
    finally:
        os.remove(taken)


SCRIPT_DATASET = '''
import os, sys
sys.path.insert(0, {tests!r})
# In a loader child this module is __mp_main__: the line says the script ran again there.
if __name__ == '__mp_main__':
    sys.stderr.write('script imported in loader {{}}\\n'.format(os.getpid()))
import numpy
import chainer
from chainermn_torus.loader import LoaderIterator
from loader_support import Squares


class InScript(Squares):
    """Defined in the script: a loader can unpickle it only by importing the script."""


if __name__ == '__main__':
    dataset = InScript(20) if sys.argv[1] == 'in-script' else chainer.datasets.TupleDataset(
        numpy.arange(20, dtype=numpy.float32).reshape(20, 1), numpy.arange(20, dtype=numpy.int32))
    it = LoaderIterator(dataset, 4, n_processes=2, shuffle=False)
    print(sorted(int(e[1]) for e in it.next()), len(it.processes))
    it.finalize()
'''


@pytest.mark.parametrize('dataset,imported', [
    pytest.param('in-script', 2, marks=pytest.mark.slow),  # full tier: spawn's own way
    ('tuple', 0)])
def test_a_loader_runs_the_script_again_only_where_its_dataset_needs_it(tmp_path, dataset,
                                                                        imported):
    # A spawned loader imports the training script before its arguments only where they
    # hold something the script defines; otherwise it starts without the script's imports
    # (loader/spawning.py).
    script = tmp_path / 'train.py'
    script.write_text(SCRIPT_DATASET.format(tests=TESTS))
    proc = subprocess.run([sys.executable, str(script), dataset], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=pythonpath()))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split('\n')[0] == '[0, 1, 2, 3] 2', proc.stdout
    assert proc.stderr.count('script imported in loader') == imported, proc.stderr[-3000:]


def test_what_a_loaders_arguments_need_of_the_script():
    from chainermn_torus.loader import spawning

    class Here(Squares):
        pass

    def transform(example):
        return example

    Here.__module__ = transform.__module__ = '__main__'
    big = numpy.zeros(10 ** 7, numpy.uint8)  # walked without copying its bytes
    assert not spawning.needs_script(chainer.datasets.TupleDataset(big, big))
    assert not spawning.needs_script(Squares(3))
    assert spawning.needs_script(Here(3))
    assert spawning.needs_script(chainer.datasets.TransformDataset(Squares(3), transform))
    assert spawning.needs_script([{'nested': (1, Here(3))}])
    assert spawning.needs_script(lambda: 0)  # cannot be pickled: multiprocessing says so
