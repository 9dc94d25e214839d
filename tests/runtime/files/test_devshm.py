"""/dev/shm and checkpoint leftovers: the room check and the sweeps never touch a live job's
files."""
import os
import socket
import subprocess
import sys

import pytest

from chainermn_torus.extensions.checkpoint import hold, sweep_temporary
from chainermn_torus.runtime.files import devshm
from conftest import ROOT, run_cli


def _dead_pid():
    p = subprocess.Popen([sys.executable, '-c', 'pass'])
    p.wait()
    return p.pid


def _touch(path, size=100):
    with open(str(path), 'wb') as f:
        f.write(b'x' * size)


def test_room_check_names_the_need_the_free_space_and_the_fixes(tmp_path):
    devshm.check_room(1, 'one byte', path=str(tmp_path))
    with pytest.raises(devshm.SharedMemoryFull) as e:
        devshm.check_room(1 << 60, "rsap's RMA window (2 rank(s) on this node x 1 EB)",
                          path=str(tmp_path))
    text = str(e.value)
    assert "rsap's RMA window" in text and 'needs 1152921504.6 GB' in text, text
    assert 'free' in text and socket.gethostname() in text and 'chainermn-torus clean' in text
    assert 'pure_allreduce' in text  # a communicator without windows


def test_sweep_removes_only_what_nobody_can_be_using(tmp_path):
    dead, live = _dead_pid(), os.getpid()
    _touch(tmp_path / f'cmtorus_nojob_{dead}_0_aa_0_0')
    _touch(tmp_path / f'cmtorus_12345_{live}_0_aa_0_0')     # a live process's
    _touch(tmp_path / 'mpich_shm_dead_0')                           # nobody maps it
    _touch(tmp_path / 'sm_segment.vm.0.8f3a0001.0')                 # Open MPI 5's
    _touch(tmp_path / 'vader_segment.vm.8f3a0001.0')                # Open MPI 4's
    held = open(str(tmp_path / 'sem.mp-held'), 'wb')                # this process holds it
    _touch(tmp_path / 'unrelated')
    try:
        gone = devshm.sweep(str(tmp_path), dry_run=True)
        assert [n for n, _, _ in gone] == [f'cmtorus_nojob_{dead}_0_aa_0_0']
        assert all((tmp_path / n).exists() for n, _, _ in gone)  # a dry run removes nothing
        gone = devshm.sweep(str(tmp_path), others=True, min_age=0)
        assert sorted(n for n, _, _ in gone) == [f'cmtorus_nojob_{dead}_0_aa_0_0',
                                                 'mpich_shm_dead_0',
                                                 'sm_segment.vm.0.8f3a0001.0',
                                                 'vader_segment.vm.8f3a0001.0']
        assert sorted(os.listdir(str(tmp_path))) == [
            f'cmtorus_12345_{live}_0_aa_0_0', 'sem.mp-held', 'unrelated']
        _touch(tmp_path / 'mpich_shm_young_0')
        assert devshm.sweep(str(tmp_path), others=True) == []  # younger than a minute
    finally:
        held.close()


def test_checkpoint_temporary_files_of_dead_writers_are_swept_by_clean(tmp_path):
    host = socket.gethostname()
    dead = tmp_path / f'snapshot_iter_8.rank0.npz.tmp.{host}.{_dead_pid()}'
    live = tmp_path / f'snapshot_iter_8.rank1.npz.tmp.{host}.{os.getpid()}'
    other = tmp_path / 'latest.json.tmp.otherhost.123'   # another host's, just written
    for path in (dead, live, other):
        _touch(path)
    (tmp_path / 'shm').mkdir()
    proc = run_cli(['clean', '--shm-dir', str(tmp_path / 'shm'), '--checkpoint-dir',
                    str(tmp_path)])
    assert proc.returncode == 0, proc.stderr
    assert 'removed ' + dead.name in proc.stdout and 'is gone' in proc.stdout
    assert not dead.exists() and live.exists() and other.exists()
    os.utime(str(other), (1, 1))  # silent for decades
    assert [n for n, _, _ in sweep_temporary(hold(str(tmp_path)))] == [other.name]


POPULATE = r'''
import mmap, os, sys, numpy
from chainermn_torus.runtime.files import devshm
fd = os.open('/dev/shm/probe', os.O_CREAT | os.O_RDWR)
os.ftruncate(fd, 4 << 20)
array = numpy.frombuffer(mmap.mmap(fd, 4 << 20), dtype=numpy.uint8)
small = numpy.frombuffer(mmap.mmap(fd, 1 << 16), dtype=numpy.uint8)
assert devshm.populate(small, 'the first 64 kB', 1 << 16) is True
for method in ('madvise', 'fork'):  # the kernel's population, and old kernels' child
    try:
        devshm.populate(array, 'a 4 MB window', 4 << 20, method=method)
    except devshm.SharedMemoryFull as e:
        print(method, e)
    else:
        print(method, 'NOT REFUSED')
'''


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason='needs root: a private tmpfs on /dev/shm '
                                              '(unshare -m, mount)')
def test_a_mapping_that_cannot_be_backed_is_an_error_not_a_bus_error():
    # 4 MB mapped on a 1 MB /dev/shm: the first write to the second MB would be SIGBUS. The
    # population answers EFAULT instead, and the error gives the need and the free space.
    proc = subprocess.run(
        ['unshare', '-m', '--propagation', 'private', 'sh', '-c',
         'mount -t tmpfs -o size=1m tmpfs /dev/shm && "$0" -c "$1"', sys.executable, POPULATE],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ['madvise', 'fork'], proc.stdout
    for text in lines:
        assert (f'a 4 MB window (4.2 MB needed on node {socket.gethostname()}) cannot be backed by '
                '/dev/shm') in text, text
        assert 'of 1.0 MB is free now' in text and 'Bus error' in text, text


@pytest.mark.root
@pytest.mark.example
@pytest.mark.skipif(os.geteuid() != 0, reason='needs root: a private tmpfs on /dev/shm '
                                              '(unshare -m, mount)')
def test_the_double_buffering_refusal_says_the_second_set_multiplies_the_need(tmp_path):
    # 30 MiB: the main communicator's 14.4 MB of node-shared rows fit, the background
    # thread's copy does not; the message must say it is a further set, not the first.
    script = ('mount -t tmpfs -o size=30m tmpfs /dev/shm && cd "$0" && .venv/bin/mpiexec -n 2 '
              '.venv/bin/python examples/mnist/train_mnist.py --communicator rsap --epoch 1 '
              '--limit 1000 --double-buffering --out "$1"')
    proc = subprocess.run(['unshare', '-m', '--propagation', 'private', 'sh', '-c', script,
                           ROOT, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "not enough shared memory: the node-shared row buffers of the background " \
        "thread's copy of the communicator" in text, text[-3000:]
    assert 'up to three times one set' in text and 'Bus error' in text, text[-3000:]


_SINGLETON = r'''
import os
import chainermn_torus
import chainermn
comm = chainermn.create_communicator('pure_allreduce')  # MPI started without a launcher
assert comm.size == 1
with open('/proc/self/maps') as f:
    mapped = sorted({line.split(None, 5)[5].strip() for line in f
                     if len(line.split(None, 5)) == 6 and '/dev/shm/' in line})
print('\n'.join(mapped))
'''


@pytest.mark.mpi  # under each MPI: Open MPI's singleton left 16 MiB at every exit
def test_a_single_process_job_leaves_nothing_of_mpi_in_dev_shm():
    proc = subprocess.run([sys.executable, '-c', _SINGLETON], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=dict(os.environ, CHAINERMN_TORUS_QUIET='1'))
    assert proc.returncode == 0, proc.stderr[-2000:]
    named = [p.split(' (deleted)')[0] for p in proc.stdout.split()
             if p.startswith('/dev/shm/') and 'cmtorus_' not in p]
    left = [p for p in named if os.path.exists(p)]
    assert left == [], (left, proc.stdout)
