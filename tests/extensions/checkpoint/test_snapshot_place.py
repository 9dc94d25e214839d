"""What a run keeps in node memory is its own (issue 82, extensions.checkpoint.snapshot_place
and in_memory): two runs of one user, job id and host never touch each other's snapshots; a
restart finds its run by the token it kept; a name another user takes first does not stop a
run; a signal is never the end of training; a write that fails after the room check skips
that generation and training goes on."""
import errno
import os
import stat

import chainer
import pytest

from chainermn_torus.extensions.checkpoint import in_memory, snapshot_place
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from chainermn_torus.runtime.files import devshm, held
from chainermn_torus.tools import clean
from tests.extensions.checkpoint.support import comm, params, trainer
from tests.other_user import as_other, needs_root, shared_dir  # noqa: F401 (a fixture)


class _Raise(chainer.training.Extension):
    """Raises ``what`` at iteration ``at``, after the snapshot of that iteration."""
    priority = chainer.training.PRIORITY_READER - 10

    def __init__(self, at, what):
        self.at, self.what = at, what

    def __call__(self, trainer):
        if trainer.updater.iteration == self.at:
            raise self.what


def _run(tmp_path, out, memory, stop_at=None, what=None, token=None, keep=2):
    tr = trainer(tmp_path / out)
    snap = in_memory.MemorySnapshot(comm(), None if memory is None else str(memory),
                                    token=token, keep=keep)
    tr.extend(snap, trigger=(3, 'iteration'))
    if stop_at is not None:
        tr.extend(_Raise(stop_at, what))
    return tr, snap


def test_two_runs_of_one_user_in_one_parent_keep_and_remove_only_their_own(tmp_path):
    memory = tmp_path / 'mem'
    long, long_snap = _run(tmp_path, 'long', memory, stop_at=9, what=RuntimeError('lost'))
    short, short_snap = _run(tmp_path, 'short', memory)
    assert long_snap.directory != short_snap.directory
    assert os.path.dirname(long_snap.directory) == str(memory)
    with pytest.raises(RuntimeError):
        long.run()  # generations 3, 6, 9 of its own; the error leaves them
    short.run()  # the same iterations, then a good end: its own directory goes, only it
    assert long_snap.generations() == [9, 6]
    assert os.listdir(str(memory)) == [os.path.basename(long_snap.directory)]
    again = trainer(tmp_path / 'again')
    restored = in_memory.MemorySnapshot(comm(), str(memory), token=long_snap.token)
    assert restored.restore(again) == 9
    assert all((params(again)[k] == v).all() for k, v in params(long).items())


def test_a_run_directory_that_exists_at_a_first_start_is_refused(tmp_path):
    token = snapshot_place.new_token()
    name = snapshot_place.run_name(token, os.uname().nodename)
    (tmp_path / 'mem').mkdir(mode=0o700)
    (tmp_path / 'mem' / name).mkdir(mode=0o700)
    with pytest.raises(CheckpointError) as e:
        in_memory.MemorySnapshot(comm(), str(tmp_path / 'mem'), token=token, first=True)
    assert 'was already there' in str(e.value) and 'never shared' in str(e.value)
    assert '\n' not in str(e.value)
    # The same run's later step uses what it made.
    later = in_memory.MemorySnapshot(comm(), str(tmp_path / 'mem'), token=token, first=False)
    assert later.directory == str(tmp_path / 'mem' / name)


def test_a_restart_finds_its_run_by_the_token_kept_in_its_output_directory(tmp_path):
    tr = trainer(tmp_path / 'out')
    first = in_memory.MemorySnapshot.for_trainer(comm(), tr, str(tmp_path / 'mem'))
    kept = tmp_path / 'out' / snapshot_place.TOKEN_FILE
    assert first.first and kept.read_text().strip() == first.token
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    again = in_memory.MemorySnapshot.for_trainer(comm(), trainer(tmp_path / 'out'),
                                                 str(tmp_path / 'mem'), restore=True)
    assert again.token == first.token and not again.first
    assert again.directory == first.directory
    # A new start (no --restore-from-memory) is a new run: a new token, a new directory.
    other = in_memory.MemorySnapshot.for_trainer(comm(), trainer(tmp_path / 'out'),
                                                 str(tmp_path / 'mem'))
    assert other.token != first.token and other.directory != first.directory
    kept.write_text('not a token\n')
    with pytest.raises(CheckpointError) as e:
        in_memory.MemorySnapshot.for_trainer(comm(), trainer(tmp_path / 'out'),
                                             str(tmp_path / 'mem'), restore=True)
    assert 'holds no snapshot token' in str(e.value) and '\n' not in str(e.value)


@pytest.mark.parametrize('what', [KeyboardInterrupt(), SystemExit(143)],
                         ids=['sigint', 'sigterm-like'])
def test_a_signal_is_never_the_end_of_training(tmp_path, what):
    """SIGINT is KeyboardInterrupt, SIGTERM abort.Terminated: BaseExceptions that Chainer's
    Trainer.run passes to no on_error but to every finalize."""
    tr, snap = _run(tmp_path, 'out', tmp_path / 'mem', stop_at=7, what=what)
    with pytest.raises(type(what)):
        tr.run()
    assert not tr.stop_trigger.fired
    assert snap.generations() == [6, 3]  # kept for the step that goes on


def test_the_end_of_training_is_its_stop_trigger(tmp_path):
    tr, snap = _run(tmp_path, 'out', tmp_path / 'mem')
    tr.run()
    assert tr.stop_trigger.fired and tr.stop_trigger.get_training_length() == (2, 'epoch')
    assert not os.path.exists(snap.directory)


def test_a_write_that_fails_after_the_room_check_skips_that_generation(tmp_path, capsys,
                                                                       monkeypatch):
    tr, snap = _run(tmp_path, 'out', tmp_path / 'mem', stop_at=12,
                    what=RuntimeError('lost'), keep=5)
    original = held.Held.write_atomic

    def full_at_6(self, name, write, *args, **kwargs):
        if tr.updater.iteration == 6 and name == 'rank0.npz':  # after the replica
            raise OSError(errno.ENOSPC, 'No space left on device')
        return original(self, name, write, *args, **kwargs)

    monkeypatch.setattr(held.Held, 'write_atomic', full_at_6)
    with pytest.raises(RuntimeError):
        tr.run()
    assert snap.generations() == [12, 9, 3] and snap.skipped == [6]
    assert not os.path.exists(os.path.join(snap.directory, 'gen_6'))  # no partial left
    out = capsys.readouterr().out
    assert out.count('snapshot 6 in node memory not kept: OSError: No space left on device') \
        == 1 and 'training goes on' in out, out


def test_a_node_that_can_never_hold_a_snapshot_ends_the_job_in_one_line(tmp_path,
                                                                        monkeypatch):
    tr, snap = _run(tmp_path, 'out', tmp_path / 'mem')
    real = os.fstatvfs

    class Tiny:
        def __init__(self, st):
            self.f_frsize, self.f_blocks, self.f_bavail = st.f_frsize, 1, 1

    monkeypatch.setattr(in_memory.os, 'fstatvfs', lambda fd: Tiny(real(fd)))
    with pytest.raises(CheckpointError) as e:
        tr.run()
    assert 'no snapshot in node memory can ever be kept' in str(e.value)
    assert '\n' not in str(e.value)


@needs_root
@pytest.mark.parametrize('taken', ['directory', 'link', 'fifo'])
def test_a_default_parent_another_user_took_first_does_not_stop_a_run(
        tmp_path, shared_dir, monkeypatch, capsys, taken):  # noqa: F811 (the fixture)
    monkeypatch.setattr(devshm, 'SHM_DIR', shared_dir)
    parent = snapshot_place.default_parent()

    def squat(path, how):
        if how == 'directory':
            os.mkdir(path, 0o777)
        elif how == 'link':
            os.symlink('/tmp', path)
        else:
            os.mkfifo(path, 0o666)
        return True

    assert as_other(squat, parent, taken)
    tr, snap = _run(tmp_path, 'out', None, stop_at=6, what=RuntimeError('lost'))
    with pytest.raises(RuntimeError):
        tr.run()
    assert os.path.dirname(snap.directory) == snapshot_place.fallback_parent(parent,
                                                                             snap.token)
    assert 'cannot hold the snapshots' in capsys.readouterr().out
    assert snap.generations() == [6, 3]
    st = os.stat(os.path.dirname(snap.directory))
    assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
    # A later step of the run (another process) finds it the same way.
    later = in_memory.MemorySnapshot(comm(), None, token=snap.token, first=False)
    assert later.restore(trainer(tmp_path / 'o2')) == 6


@needs_root
def test_clean_lists_and_removes_only_this_users_ended_runs(tmp_path, shared_dir,
                                                            monkeypatch, capsys):  # noqa: F811
    monkeypatch.setattr(devshm, 'SHM_DIR', shared_dir)
    tr, snap = _run(tmp_path, 'out', None, stop_at=6, what=RuntimeError('lost'))
    with pytest.raises(RuntimeError):
        tr.run()
    snap.place.close()  # its process has ended
    live = in_memory.MemorySnapshot(comm(), None)  # a running job holds its directory
    assert as_other(lambda d: os.mkdir(os.path.join(d, 'cmtorus-snapshots-65534'), 0o700)
                    or True, shared_dir)
    assert clean.main(['--shm-dir', shared_dir]) == 0
    out = capsys.readouterr().out
    assert f'kept {snap.directory}' in out and '--snapshots removes them' in out
    assert 'a running job holds it' in out and os.path.isdir(snap.directory)
    assert clean.main(['--shm-dir', shared_dir, '--snapshots']) == 0
    assert not os.path.exists(snap.directory) and os.path.isdir(live.directory)
    assert f'removed {snap.directory}' in capsys.readouterr().out
    live.place.close()
    snapshot_place.remove_run(live.directory)
