"""What another user could put in or around a checkpoint directory (issue 65, items 3-6):
the directory a link or another user's, a rank file whose array would decompress to far
more than the model holds, a manifest out of its schema or larger than its bound. Each is
refused in one line, at start where it can be, or passed over for the next older complete
checkpoint; nothing of the user's other checkpoints is touched. One rank in this process."""
import json
import os
import tracemalloc
import zipfile
import zlib

import numpy
import pytest
from chainer.training import triggers

from chainermn_torus.extensions.checkpoint import MultiNodeCheckpointer
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from tests.extensions.checkpoint.support import checkpointed, comm, trainer
from tests.other_user import as_other, needs_root, shared_dir  # noqa: F401


def _run_to(tr, iteration):
    tr.stop_trigger = triggers.IntervalTrigger(iteration, 'iteration')
    tr.run()


def _snapshot(directory):
    return {n: (directory / n).read_bytes() for n in sorted(os.listdir(str(directory)))}


def _rewrite(ck, iteration, change):
    """Both manifests of ``iteration`` changed alike (what someone who can write the
    directory does)."""
    for m in ('latest.json', f'manifest_iter_{iteration}.json'):
        data = json.loads((ck / m).read_text())
        change(data)
        (ck / m).write_text(json.dumps(data))


@needs_root
def test_a_checkpoint_directory_planted_as_a_link_is_refused_at_start(tmp_path, shared_dir):
    # Before: the link was followed; the other experiment's checkpoint 5 went to the
    # rotation and its latest.json was overwritten.
    tr, _ = checkpointed(tmp_path, name='experiment')
    _run_to(tr, 6)
    other = tmp_path / 'experiment'
    before = _snapshot(other)
    planted = os.path.join(shared_dir, 'ck')
    as_other(os.symlink, str(other), planted)
    with pytest.raises(CheckpointError) as e:
        MultiNodeCheckpointer(comm(), planted)
    text = str(e.value)
    assert text.startswith(f"chainermn_torus: refusing checkpoints in '{planted}'") \
        and 'a symbolic link owned by nobody (uid 65534)' in text and \
        f"to '{other}'" in text and text.count('\n') == 0, text
    assert _snapshot(other) == before


@needs_root
def test_another_users_open_directory_is_refused_at_start_unless_trusted(shared_dir,
                                                                         monkeypatch):
    # Before: written to without a word; that user could read, remove and replace the files.
    theirs = os.path.join(shared_dir, 'ck')

    def make():
        os.mkdir(theirs)
        os.chmod(theirs, 0o777)
    as_other(make)
    with pytest.raises(CheckpointError) as e:
        MultiNodeCheckpointer(comm(), theirs)
    assert 'it is a directory owned by nobody (uid 65534)' in str(e.value) and \
        '--trust-checkpoint-dir' in str(e.value), str(e.value)
    assert os.listdir(theirs) == []
    MultiNodeCheckpointer(comm(), theirs, trust=True)  # the user said so


def test_a_decompression_bomb_is_refused_from_its_header_and_the_older_one_resumed(
        tmp_path, capsys):
    # Before: a rank file whose array held 6 GiB of zeros (14 MB compressed), with a
    # matching size and CRC in its manifest, was decompressed whole and OOM-killed rank 0.
    tr, _ = checkpointed(tmp_path)
    _run_to(tr, 6)
    ck = tmp_path / 'ck'
    name = 'snapshot_iter_6.rank0.npz'
    with numpy.load(str(ck / name)) as z:
        arrays = {k: z[k] for k in z.files}
    key = 'updater/model:main/predictor/l1/W'
    arrays[key] = numpy.zeros((4096, 4096), numpy.float32)  # 64 MiB, about 64 KB stored
    with zipfile.ZipFile(str(ck / name), 'w', zipfile.ZIP_DEFLATED) as z:
        for k, a in arrays.items():
            with z.open(k + '.npy', 'w', force_zip64=True) as m:
                numpy.lib.format.write_array(m, a)
    data = (ck / name).read_bytes()
    assert len(data) < 1 << 20
    _rewrite(ck, 6, lambda m: m['checks'].update({name: {'bytes': len(data),
                                                         'crc32': zlib.crc32(data)}}))
    again = trainer(tmp_path / 'o2')
    tracemalloc.start()
    try:
        assert MultiNodeCheckpointer(comm(), str(ck)).maybe_resume(again) == 3
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak  # the 64 MiB array was never decompressed
    out = capsys.readouterr().out
    assert f'array {key} is (4096, 4096) <f4 there, (4, 3) <f4 in this job' in out \
        and 'falling back' in out, out


@pytest.mark.parametrize('ranks', [3, 0, '2', 1])
def test_a_manifest_whose_ranks_is_out_of_its_schema_falls_back(tmp_path, capsys, ranks):
    # Before: 3, 0 and "2" ended every rank with IndexError, ZeroDivisionError and
    # TypeError; 1 (beside two rank files) resharded as if one rank had written it.
    tr, _ = checkpointed(tmp_path)
    _run_to(tr, 6)
    ck = tmp_path / 'ck'
    if ranks == 1:  # a checkpoint of two ranks whose manifests say one
        (ck / 'snapshot_iter_6.rank1.npz').write_bytes(
            (ck / 'snapshot_iter_6.rank0.npz').read_bytes())
    _rewrite(ck, 6, lambda m: m.update(ranks=ranks))
    again = trainer(tmp_path / 'o2')
    assert MultiNodeCheckpointer(comm(), str(ck)).maybe_resume(again) == 3
    out = capsys.readouterr().out
    said = {3: "'files' is not the 3 rank files of iteration 6",
            0: "'ranks' is 0, not a rank count >= 1",
            '2': "'ranks' is '2', not a rank count >= 1",
            1: 'it says 1 rank(s) but snapshot_iter_6.rank1.npz is there too'}[ranks]
    assert said in out and 'falling back' in out and 'Traceback' not in out, out


def test_a_manifest_beyond_its_bound_is_refused_from_its_size(tmp_path, capsys):
    # Before: a 1 GiB manifest was read and parsed (27 s) before the fallback.
    tr, _ = checkpointed(tmp_path)
    _run_to(tr, 6)
    ck = tmp_path / 'ck'
    for m in ('latest.json', 'manifest_iter_6.json'):
        with open(str(ck / m), 'r+b') as f:
            f.truncate(1 << 30)  # sparse: nothing written, 1 GiB to read
    assert MultiNodeCheckpointer(comm(), str(ck)).maybe_resume(trainer(tmp_path / 'o2')) == 3
    out = capsys.readouterr().out
    assert 'holds 1,073,741,824 bytes, more than the 16,777,216 such a file may' in out, out
