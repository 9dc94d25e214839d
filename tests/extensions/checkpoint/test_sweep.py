"""What killed checkpoint writers left, one process (extensions.checkpoint.sweep): whose a
file was is read from its name; a live writer's files stay."""
import os
import subprocess
import sys

from chainermn_torus.extensions.checkpoint import files, sweep
from chainermn_torus.extensions.checkpoint.sweep import sweep_temporary

HOST = 'here.example'


def _dead_pid():
    proc = subprocess.Popen([sys.executable, '-c', 'pass'])
    proc.wait()
    return proc.pid


def _touch(directory, name, age=0.0, now=1e9):
    path = directory / name
    path.write_bytes(b'x' * 10)
    os.utime(str(path), (now - age, now - age))
    return name


def test_leftovers_by_writer_and_manifest(tmp_path):
    dead, alive, now = _dead_pid(), os.getpid(), 1e9
    names = [
        _touch(tmp_path, f'.writing_iter_8.rank0.{HOST}.{dead}'),   # dead marker
        _touch(tmp_path, f'.writing_iter_8.rank1.{HOST}.{alive}'),  # live marker
        _touch(tmp_path, 'snapshot_iter_8.rank0.npz'),   # no manifest, writer gone
        _touch(tmp_path, 'snapshot_iter_8.rank1.npz'),   # no manifest, writer alive
        _touch(tmp_path, 'snapshot_iter_4.rank0.npz'),   # complete
        _touch(tmp_path, 'manifest_iter_4.json'),
        _touch(tmp_path, f'x.npz.tmp.{HOST}.{dead}'),
        _touch(tmp_path, f'y.npz.tmp.{HOST}.{alive}'),
        _touch(tmp_path, 'z.npz.tmp.far.example.7', age=sweep.STALE_S + 1),  # silent host
        _touch(tmp_path, 'w.npz.tmp.far.example.8', age=sweep.STALE_S - 60),  # recent
    ]
    doomed = dict(sweep.leftovers(files.hold(str(tmp_path)), sorted(names), now, HOST))
    assert sorted(doomed) == sorted([names[0], names[2], names[6], names[8]])
    assert doomed[names[0]] == f'writer {dead} on this host is gone'
    assert 'checkpoint 8 which has no manifest' in doomed[names[2]]
    assert doomed[names[8]] == f'writer on far.example silent for {sweep.STALE_S + 1:.0f} s'
    # A node-local directory holds no manifest: rank 0's list of complete ones decides.
    assert names[4] in dict(sweep.leftovers(files.hold(str(tmp_path)), sorted(names), now, HOST,
                                            complete=[]))
    assert names[4] not in dict(sweep.leftovers(files.hold(str(tmp_path)), sorted(names), now, HOST,
                                                complete=[4]))
    # Without any manifest and without rank 0's word, rank files are left alone.
    (tmp_path / 'manifest_iter_4.json').unlink()
    left = dict(sweep.leftovers(files.hold(str(tmp_path)), sorted(names[:5]), now, HOST))
    assert not [n for n in left if n.startswith('snapshot')]


def test_sweep_temporary_removes_and_counts(tmp_path):
    dead = _dead_pid()
    import socket
    name = f'a.npz.tmp.{socket.gethostname()}.{dead}'
    (tmp_path / name).write_bytes(b'x' * 123)
    assert sweep_temporary(files.hold(str(tmp_path)), dry_run=True) == \
        [(name, 123, f'writer {dead} on this host is gone')]
    assert (tmp_path / name).exists()
    assert [r[:2] for r in sweep_temporary(files.hold(str(tmp_path)))] == [(name, 123)]
    assert not (tmp_path / name).exists()
