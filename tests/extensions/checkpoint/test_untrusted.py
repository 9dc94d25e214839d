"""A checkpoint directory someone else could have written: nothing in it ever runs code (no
pickle), and a directory or file another user owns or may write is refused in one line
unless the user says it is trusted. One rank in this process (MPI_COMM_SELF)."""
import io
import json
import os
import zipfile
import zlib

import numpy
import pytest
from chainer.training import triggers

from chainermn_torus.extensions.checkpoint import MultiNodeCheckpointer, arrays
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from tests.extensions.checkpoint.support import checkpointed, comm, trainer


def _run_to(tr, iteration):
    tr.stop_trigger = triggers.IntervalTrigger(iteration, 'iteration')
    tr.run()


class _Payload:
    """What unpickling would run: it writes the file ``path``."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, 'w'))


def _npy(array, allow_pickle=True):
    out = io.BytesIO()
    numpy.save(out, array, allow_pickle=allow_pickle)
    return out.getvalue()


def _add_member(npz, key, data):
    with zipfile.ZipFile(str(npz), 'a') as z:
        z.writestr(key + '.npy', data)


def _record(ck, iteration, name):
    """Rewrite the manifests' size and CRC-32 of ``name`` as the file now is: what an
    attacker who can write the directory does."""
    path = ck / name
    check = {'bytes': path.stat().st_size, 'crc32': zlib.crc32(path.read_bytes())}
    for m in ('latest.json', f'manifest_iter_{iteration}.json'):
        data = json.loads((ck / m).read_text())
        data['checks'][name] = check
        (ck / m).write_text(json.dumps(data))


def test_a_rank_file_with_a_pickled_object_is_refused_and_runs_nothing(tmp_path):
    tr, _ = checkpointed(tmp_path)
    _run_to(tr, 3)
    ck, ran = tmp_path / 'ck', tmp_path / 'ran'
    payload = numpy.empty((), dtype=object)
    payload[()] = _Payload(str(ran))
    _add_member(ck / 'snapshot_iter_3.rank0.npz', 'updater/evil', _npy(payload))
    _record(ck, 3, 'snapshot_iter_3.rank0.npz')
    again = MultiNodeCheckpointer(comm(), str(ck))
    with pytest.raises(CheckpointError) as e:
        again.resume(trainer(tmp_path / 'o2'))
    text = str(e.value)
    assert "holds an object array ('updater/evil')" in text and 'pickle runs code' in text, text
    assert text.count('\n') == 0
    assert not ran.exists()  # nothing was unpickled
    with pytest.raises(CheckpointError):
        again.maybe_resume(trainer(tmp_path / 'o3'))  # no older checkpoint to fall back to
    assert not ran.exists()


def test_a_manifest_without_checks_is_refused(tmp_path):
    tr, _ = checkpointed(tmp_path)
    _run_to(tr, 3)
    ck = tmp_path / 'ck'
    for m in ('latest.json', 'manifest_iter_3.json'):
        data = json.loads((ck / m).read_text())
        del data['checks']
        (ck / m).write_text(json.dumps(data))
    with pytest.raises(CheckpointError) as e:
        MultiNodeCheckpointer(comm(), str(ck)).resume(trainer(tmp_path / 'o2'))
    assert 'does not record every rank file\'s size and CRC-32 ("checks")' in str(e.value)


def test_none_values_are_stored_without_pickle_and_old_ones_read_without_it(tmp_path):
    path = tmp_path / 'f.npz'
    stored = arrays.for_saving({'a': numpy.asarray(None), 'b': numpy.arange(3)})
    numpy.savez(str(path), **stored)
    with numpy.load(str(path), allow_pickle=False) as z:  # no object array left
        assert sorted(z.files) == ['b', arrays.NONE_KEYS]
    with arrays.RankFile(str(path)) as f:
        assert f['a'][()] is None and 'a' in f and list(f['b']) == [0, 1, 2]
    # Chainer's own None (numpy's pickle of it), as earlier checkpoints hold it: recognised
    # by its bytes, not unpickled.
    _add_member(path, 'old_none', _npy(numpy.asarray(None)))
    with arrays.RankFile(str(path)) as f:
        assert f['old_none'][()] is None
    with pytest.raises(CheckpointError) as e:
        arrays.for_saving({'x': numpy.array([1, 'a', None], dtype=object)})
    assert "cannot checkpoint 'x': it is an object array" in str(e.value)


@pytest.mark.parametrize('trust', [False, True])
def test_a_directory_others_may_write_is_refused_unless_trusted(tmp_path, trust, monkeypatch):
    tr, _ = checkpointed(tmp_path)
    _run_to(tr, 3)
    ck = tmp_path / 'ck'
    assert ck.stat().st_mode & 0o777 == 0o700  # made private
    ck.chmod(0o775)  # a shared project directory
    if trust:
        # what an entry point hands down from CHAINERMN_TORUS_TRUST_CHECKPOINTS=1
        assert MultiNodeCheckpointer(comm(), str(ck), trust=True).resume(
            trainer(tmp_path / 'o2')) == 3
        return
    # Refused when the checkpointer is made: before any training, nothing written there.
    before = sorted(os.listdir(str(ck)))
    with pytest.raises(CheckpointError) as e:
        MultiNodeCheckpointer(comm(), str(ck))
    text = str(e.value)
    assert f'the checkpoint directory {ck}: it can be written by its group (mode 775' \
        in text and '--trust-checkpoint-dir' in text and 'chmod go-w' in text, text
    assert text.count('\n') == 0 and sorted(os.listdir(str(ck))) == before


def test_a_rank_file_replaced_by_a_link_is_refused_even_when_trusted(tmp_path, monkeypatch):
    tr, _ = checkpointed(tmp_path)
    _run_to(tr, 3)
    ck = tmp_path / 'ck'
    real = tmp_path / 'elsewhere.npz'
    os.rename(str(ck / 'snapshot_iter_3.rank0.npz'), str(real))
    os.symlink(str(real), str(ck / 'snapshot_iter_3.rank0.npz'))
    for trust in (False, True):
        with pytest.raises(CheckpointError) as e:
            MultiNodeCheckpointer(comm(), str(ck), trust=trust).resume(trainer(tmp_path / 'o2'))
        assert 'snapshot_iter_3.rank0.npz: it is a symbolic link owned by' in str(e.value) and \
            f"to '{real}'" in str(e.value), str(e.value)
    # A hard link (another name of one of the user's files) is refused too.
    os.remove(str(ck / 'snapshot_iter_3.rank0.npz'))
    os.link(str(real), str(ck / 'snapshot_iter_3.rank0.npz'))
    with pytest.raises(CheckpointError) as e:
        MultiNodeCheckpointer(comm(), str(ck)).resume(trainer(tmp_path / 'o3'))
    assert 'it has 2 hard links' in str(e.value), str(e.value)


@pytest.mark.skipif(os.getuid() != 0, reason='giving a file to another user needs root')
def test_a_file_another_user_owns_is_refused(tmp_path):
    tr, _ = checkpointed(tmp_path)
    _run_to(tr, 3)
    ck = tmp_path / 'ck'
    os.chown(str(ck / 'manifest_iter_3.json'), 65534, 65534)
    os.chown(str(ck / 'latest.json'), 65534, 65534)
    with pytest.raises(CheckpointError) as e:
        MultiNodeCheckpointer(comm(), str(ck)).resume(trainer(tmp_path / 'o2'))
    assert 'latest.json: it is a file owned by ' in str(e.value) and \
        '(uid 65534)' in str(e.value), str(e.value)


def _plant(ck, name, data=b'x' * 10, uid=65534):
    (ck / name).write_bytes(data)
    os.chown(str(ck / name), uid, uid)
    return name


def _renamed(ck, old, new, manifest, uid=None):
    """Checkpoint ``old``'s files and manifest as checkpoint ``new`` (the manifest's
    iteration, its files and their checks renamed), owned by ``uid`` where given."""
    made = []
    names = {n: n.replace(f'iter_{old}.', f'iter_{new}.')
             for n in manifest['files']}
    for a, b in names.items():
        (ck / b).write_bytes((ck / a).read_bytes())
        made.append(b)
    data = dict(manifest, iteration=new, files=[names[n] for n in manifest['files']],
                checks={names[n]: c for n, c in manifest['checks'].items()})
    (ck / f'manifest_iter_{new}.json').write_text(json.dumps(data))
    made.append(f'manifest_iter_{new}.json')
    if uid is not None:
        for n in made:
            os.chown(str(ck / n), uid, uid)
    return made


@pytest.mark.skipif(os.getuid() != 0, reason='giving a file to another user needs root')
def test_other_users_files_in_a_trusted_directory_are_passed_over_never_removed_or_loaded(
        tmp_path, monkeypatch, capsys):
    """Issue 82, P6: in a shared sticky directory the user trusts, another user's file named
    like a leftover made the start-up sweep's unlink fail (EPERM, a traceback on every rank
    at every start), and a checkpoint planted as iteration 90 was loaded, and stayed the
    newest at every later resume."""
    tr, _ = checkpointed(tmp_path)
    _run_to(tr, 3)
    ck = tmp_path / 'ck'
    ck.chmod(0o1777)
    manifest = json.loads((ck / 'manifest_iter_3.json').read_text())
    theirs = [_plant(ck, '.writing_iter_12.rank0.vm.99999'),
              _plant(ck, 'snapshot_iter_12.rank0.npz.tmp.vm.99999'),
              _plant(ck, 'snapshot_iter_14.rank0.npz')]  # a rank file no manifest names
    theirs += _renamed(ck, 3, 90, manifest, uid=65534)
    capsys.readouterr()
    again = MultiNodeCheckpointer(comm(), str(ck), trust=True)
    said = capsys.readouterr()
    line = [ln for ln in (said.out + said.err).splitlines() if 'of other users' in ln]
    passed = (f'{len(theirs)} file(s) of other users in {ck} are passed over, never read or '
              'removed: ')
    assert len(line) == 1 and passed in line[0], line
    assert 'nobody (uid 65534)' in line[0], line
    assert again.maybe_resume(trainer(tmp_path / 'o2')) == 3  # the user's own, not 90
    assert all((ck / n).exists() for n in theirs)  # nothing of theirs removed
    # Asked for the newest by name, theirs is refused in one line, whatever the trust.
    from chainermn_torus.extensions.checkpoint import files
    problem, _, _ = files.read_manifest(files.hold(str(ck), trusted=True),
                                        'manifest_iter_90.json', files.layout(
                                            trainer(tmp_path / 'o3').updater
                                            .get_optimizer('main').target), trusted=True)
    assert 'manifest_iter_90.json is a file owned by nobody (uid 65534): a checkpoint is ' \
        'loaded only from your own files, even in a directory you trust' in problem, problem


def test_a_checkpoint_whose_manifest_names_another_iteration_is_refused(tmp_path):
    """Issue 82, P6: a checkpoint's files renamed (or copied) as another iteration: the
    iteration its rank files hold must be its manifest's."""
    tr, _ = checkpointed(tmp_path)
    _run_to(tr, 3)
    ck = tmp_path / 'ck'
    manifest = json.loads((ck / 'manifest_iter_3.json').read_text())
    _renamed(ck, 3, 90, manifest)
    (ck / 'latest.json').write_text((ck / 'manifest_iter_90.json').read_text())
    with pytest.raises(CheckpointError) as e:
        MultiNodeCheckpointer(comm(), str(ck)).resume(trainer(tmp_path / 'o2'))
    assert 'snapshot_iter_90.rank0.npz holds the trainer at iteration 3, and its manifest ' \
        'says 90 (a checkpoint renamed or planted)' in str(e.value), str(e.value)
    # --auto-resume falls back to the checkpoint that is what it says.
    assert MultiNodeCheckpointer(comm(), str(ck)).maybe_resume(trainer(tmp_path / 'o3')) == 3


def test_a_checkpoint_directory_removed_while_the_job_runs_is_said_as_removed(tmp_path):
    """Issue 82, P8: it was "Free space there ..."."""
    import shutil
    tr, checkpointer = checkpointed(tmp_path)
    _run_to(tr, 3)
    shutil.rmtree(str(tmp_path / 'ck'))
    with pytest.raises(CheckpointError) as e:
        checkpointer(tr)  # the next checkpoint
    text = str(e.value)
    assert 'was removed while the job ran, its checkpoints with it' in text and \
        'Make it again, or choose another --checkpoint-dir.' in text, text
    assert 'Free space' not in text and text.count('\n') == 0
