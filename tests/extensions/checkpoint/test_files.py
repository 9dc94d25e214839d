"""A checkpoint directory's files, one process: the manifest's checks and what each
refusal names (extensions.checkpoint.files)."""
import json
import os

import numpy
import pytest
from chainer.training import triggers

from chainermn_torus.extensions.checkpoint import files
from tests.extensions.checkpoint.support import Net, checkpointed


def held(path):
    """The directory as a job holds it (``files.hold``)."""
    return files.hold(str(path))


@pytest.fixture
def written(tmp_path):
    """A directory with checkpoints 3 and 6 of a trained model, written by one rank."""
    tr, ck = checkpointed(tmp_path)
    tr.stop_trigger = triggers.IntervalTrigger(6, 'iteration')
    tr.run()
    return tmp_path / 'ck', tr


def test_manifests_newest_first_and_the_layout_they_record(written):
    ck, tr = written
    assert files.manifests(held(ck)) == [(6, 'manifest_iter_6.json'),
                                        (3, 'manifest_iter_3.json')]
    manifest = json.loads((ck / files.MANIFEST).read_text())
    assert manifest['iteration'] == 6 and manifest['ranks'] == 1
    assert manifest['files'] == ['snapshot_iter_6.rank0.npz']
    assert manifest['model'] == files.layout(tr.updater.get_optimizer('main').target)
    assert ['/predictor/l1/W', [4, 3], '<f4'] in manifest['model']
    record = manifest['checks']['snapshot_iter_6.rank0.npz']
    assert record == {'bytes': os.path.getsize(str(ck / 'snapshot_iter_6.rank0.npz')),
                      'crc32': files.crc32(str(ck / 'snapshot_iter_6.rank0.npz'))}
    assert 'checkpoint 6 in' in files.what_is_kept(held(ck))
    assert 'no earlier checkpoint' in files.what_is_kept(files.hold(str(ck / 'none'),
                                                                   create=True))


def test_read_manifest_names_what_is_wrong(written, tmp_path):
    ck, tr = written
    layout = files.layout(tr.updater.get_optimizer('main').target)
    assert files.read_manifest(held(ck), files.MANIFEST, layout)[0] is None
    with pytest.raises(FileNotFoundError):
        held(tmp_path / 'nowhere')
    problem, _, fatal = files.read_manifest(held(tmp_path), files.MANIFEST, layout)
    assert 'no latest.json' in problem and fatal
    (tmp_path / 'bad.json').write_text('[1, 2]')
    problem, _, fatal = files.read_manifest(held(tmp_path), 'bad.json', layout)
    assert 'bad.json is not a chainermn-torus manifest' in problem and not fatal
    wider = files.layout(Net(units=5))
    problem, _, fatal = files.read_manifest(held(ck), files.MANIFEST, wider)
    assert fatal and '/l1/W' in problem and '(4, 3)' in problem and '(5, 3)' in problem
    problem, _, fatal = files.read_manifest(held(ck), files.MANIFEST, layout[:-1])
    assert fatal and f'{len(layout)} arrays there, {len(layout) - 1} here' in problem


def test_verify_file_finds_truncation_corruption_and_nan(written):
    ck, _ = written
    manifest = json.loads((ck / files.MANIFEST).read_text())
    name = manifest['files'][0]
    path = ck / name
    assert files.verify_file(held(ck), manifest, name, 0) is None
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    assert f'{len(data) - 10} bytes, the manifest says {len(data)}' in \
        files.verify_file(held(ck), manifest, name, 0)
    corrupt = bytearray(data)
    corrupt[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(corrupt))
    assert 'CRC-32' in files.verify_file(held(ck), manifest, name, 0)
    with numpy.load(str(ck / 'snapshot_iter_3.rank0.npz')) as z:
        arrays = {k: z[k].copy() for k in z.files}
    arrays['updater/model:main/predictor/l2/b'][1] = numpy.inf
    arrays[files.ITERATION_KEY] = numpy.asarray(manifest['iteration'])  # its own (issue 82)
    with open(str(path), 'wb') as f:
        numpy.savez(f, **arrays)
    manifest['checks'][name] = {'bytes': path.stat().st_size, 'crc32': files.crc32(str(path))}
    problem = files.verify_file(held(ck), manifest, name, 0)
    assert '1 NaN/Inf value(s), the first in updater/model:main/predictor/l2/b' in problem
    path.unlink()
    assert files.verify_file(held(ck), manifest, name, 0) == \
        f'rank 0 cannot see {path}'


def test_replica_digest_tells_replicas_apart(written):
    ck, _ = written
    a = files.replica_digest(str(ck / 'snapshot_iter_6.rank0.npz'))
    b = files.replica_digest(str(ck / 'snapshot_iter_3.rank0.npz'))
    assert a[0] != b[0] and set(a[1]) == set(b[1])
    assert all(k.startswith(('updater/model:', 'updater/optimizer:')) for k in a[1])
    assert files.replica_digest(str(ck / 'snapshot_iter_6.rank0.npz')) == a
