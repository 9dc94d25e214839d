"""Checkpoint and resume with real ranks: a run killed (also while writing) and resumed ends
with the same parameters, bit for bit, as an uninterrupted one; bad resumes are explained."""
import json
import os
import re
import time

import numpy
import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from conftest import ROOT, line_with, run_cli, run_mpi

EXAMPLE = os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py')
pytestmark = [pytest.mark.example,
              pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                                 reason='Debian package dataset-fashion-mnist is not installed '
                                        '(make setup installs it)')]
# 2000 images over 2 ranks, batch 100: 10 iterations per epoch, 30 in all; checkpoints every 4.
BASE = ['--epoch', '3', '--limit', '2000', '--unit', '50', '--checkpoint-interval', '4']


FAULT = os.path.join(ROOT, 'tests', 'mpi_workers', 'checkpoint_fault.py')


def train(nprocs, out, ckpt, *extra, env=None, fault=None):
    """The MNIST example, unchanged; ``fault``: 'WHEN:I', injected (checkpoint_fault.py)."""
    wrap = [FAULT, fault] if fault else []
    return run_mpi(nprocs, wrap + [EXAMPLE, '--out', str(out), '--checkpoint-dir', str(ckpt)]
                   + BASE + list(extra), timeout=300, env=env)


def params(out):
    with numpy.load(str(out / 'model_final.npz')) as z:
        return {k: z[k].copy() for k in z.files}


# Killed once a checkpoint is complete, at P = 2: the ImageNet example's kill-and-resume test
# (after:4); the same resume in one process: tests/extensions/checkpoint/test_resharding.py.
@pytest.mark.parametrize('nprocs, flags, fault', [
    (2, [], 'during:12'),   # killed between writing and renaming: resumes from iteration 8
    (3, ['--double-buffering'], 'after:8'),
], ids=['kill-while-writing', 'double-buffering-3-ranks'])
def test_killed_and_resumed_run_equals_uninterrupted(tmp_path, nprocs, flags, fault):
    whole = train(nprocs, tmp_path / 'whole', tmp_path / 'ck-whole', *flags)
    assert whole.returncode == 0, whole.stderr[-3000:]
    ck = tmp_path / 'ck'
    crashed = train(nprocs, tmp_path / 'crash', ck, *flags,
                    fault=fault)
    assert crashed.returncode != 0  # rank 0 was killed; the launcher ended the rest
    when, it = fault.split(':')
    expected = int(it) if when == 'after' else int(it) - 4
    manifest = json.loads((ck / 'latest.json').read_text())
    assert manifest['iteration'] == expected, manifest
    # The half-written file of the interrupted checkpoint is never under the final name.
    if when == 'during':
        assert not (ck / f'snapshot_iter_{it}.rank0.npz').exists()
    if when == 'during':  # the killed writer's temporary file is there until the next start
        assert [p.name for p in ck.glob('*.tmp.*')], sorted(p.name for p in ck.iterdir())
    resumed = train(nprocs, tmp_path / 'resumed', ck, *flags, '--resume')
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert not list(ck.glob('*.tmp*')), sorted(p.name for p in ck.iterdir())
    assert f'resumed from {ck} at iteration {expected}' in resumed.stdout
    a, b = params(tmp_path / 'whole'), params(tmp_path / 'resumed')
    assert a.keys() == b.keys()
    diff = max(float(numpy.abs(a[k] - b[k]).max()) for k in a)
    print(f'{fault}: max abs parameter difference resumed vs uninterrupted: {diff}')
    assert diff == 0.0


def test_resume_refuses_other_data_at_another_rank_count_said_once(tmp_path):
    # Each refusal is a piece's, tested in one process (tests/checkpoint: another model,
    # optimizer or data, a batch that does not split, no manifest); what only a job shows:
    # at another rank count the data check still comes first, every rank refuses alike, and
    # the job says it once.
    ck = tmp_path / 'ck'
    first = train(2, tmp_path / 'o1', ck, '--epoch', '1')
    assert first.returncode == 0, first.stderr[-3000:]
    other_data = train(4, tmp_path / 'o4', ck, '--limit', '1000', '--resume')
    assert other_data.returncode != 0
    said = line_with(other_data.stderr, '2000 examples', '1000 examples')
    assert said and len(re.findall(r'shard order [0-9a-f]{8}', said)) == 2, \
        other_data.stderr[-2000:]
    assert other_data.stderr.count('cannot resume from') == 1, other_data.stderr[-2000:]
    assert 'resumed from' not in other_data.stdout


def test_unwritable_checkpoint_dir_fails_at_start(tmp_path):
    blocker = tmp_path / 'file'
    blocker.write_text('not a directory')
    proc = train(2, tmp_path / 'o', blocker / 'ck')
    assert proc.returncode != 0
    assert 'cannot write checkpoints to' in proc.stderr and 'rank(s) 0, 1' in proc.stderr
    assert 'test accuracy' not in proc.stdout  # failed before training


def test_unwritable_output_dir_fails_at_start(tmp_path):
    blocker = tmp_path / 'file'
    blocker.write_text('not a directory')
    proc = run_mpi(2, [EXAMPLE, '--epoch', '1', '--limit', '1000', '--out',
                       str(blocker / 'out')], timeout=120)
    assert proc.returncode != 0 and 'cannot write results to' in proc.stderr
    assert 'test accuracy' not in proc.stdout


def test_damaged_latest_checkpoint_is_named_and_auto_resume_falls_back(tmp_path):
    # 2 epochs = 20 iterations, checkpoints every 4: 16 and 20 are kept (keep=2).
    ck = tmp_path / 'ck'
    first = train(2, tmp_path / 'o1', ck, '--epoch', '2')
    assert first.returncode == 0, first.stderr[-3000:]
    assert sorted(p.name for p in ck.glob('manifest_iter_*.json')) == [
        'manifest_iter_16.json', 'manifest_iter_20.json']
    damaged = ck / 'snapshot_iter_20.rank1.npz'
    size = damaged.stat().st_size
    with open(str(damaged), 'r+b') as f:
        f.truncate(size // 2)  # what a disk that filled up, or a lost write, leaves
    # Rank 1's file, checked by rank 1: every rank falls back together, said by rank 0.
    # (--resume's refusal, the CRC and the NaN checks: tests/extensions/checkpoint/test_files.py.)
    again = train(2, tmp_path / 'o3', ck, '--auto-resume')
    assert again.returncode == 0, again.stderr[-3000:]
    assert (f'snapshot_iter_20.rank1.npz has {size // 2} bytes, the manifest '
            f'says {size}') in again.stdout, again.stdout[-3000:]
    assert again.stdout.count('falling back to the newest complete one') == 1
    assert f'resumed from {ck} at iteration 16' in again.stdout


def test_a_failed_write_leaves_no_temporary_file_and_keeps_the_previous_checkpoint(tmp_path):
    ck = tmp_path / 'ck'
    proc = train(2, tmp_path / 'o', ck, fault='full:8')
    assert proc.returncode != 0
    assert 'rank 0 cannot write checkpoint' in proc.stderr and 'No space left' in proc.stderr
    assert 'needed for the rank files of this host' in proc.stderr, proc.stderr[-2000:]
    assert f'checkpoint 4 in {str(ck)!r} stays the latest (complete and intact)' \
        in proc.stderr, proc.stderr[-2000:]
    assert json.loads((ck / 'latest.json').read_text())['iteration'] == 4
    assert not list(ck.glob('*.tmp*')), sorted(p.name for p in ck.iterdir())
    # Rank 1 had finished its file of checkpoint 8 when the job ended: a rank file without a
    # manifest and rank 1's in-progress marker, both of a dead writer. clean removes them
    # (as the next job's start does) and nothing of checkpoint 4.
    marker, = ck.glob('.writing_iter_8.rank1.*')
    pid, deadline = int(marker.name.rsplit('.', 1)[1]), time.time() + 10
    while os.path.exists(f'/proc/{pid}') and time.time() < deadline:
        time.sleep(0.05)  # mpiexec can return while its aborted ranks are still exiting
    cleaned = run_cli(['clean', '--shm-dir', str(tmp_path), '--checkpoint-dir', str(ck)])
    assert cleaned.returncode == 0, cleaned.stderr
    assert 'snapshot_iter_8.rank1.npz' in cleaned.stdout, cleaned.stdout
    assert 'which has no manifest' in cleaned.stdout, cleaned.stdout
    assert sorted(p.name for p in ck.iterdir()) == [
        'latest.json', 'manifest_iter_4.json', 'snapshot_iter_4.rank0.npz',
        'snapshot_iter_4.rank1.npz']
    # The very first checkpoint failing claims no earlier one.
    first = train(2, tmp_path / 'o1', tmp_path / 'ck1',
                  fault='full:4')
    assert first.returncode != 0 and 'No space left' in first.stderr
    assert 'no earlier checkpoint was completed in' in first.stderr, first.stderr[-2000:]
    assert 'intact' not in first.stderr


def _rewrite_with_nan(ck, iteration, rank, value=numpy.nan):
    """Put ``value`` (a NaN: a checkpoint written from a diverged state before they were
    refused) in one parameter of a rank file and record the new size and CRC in the
    manifests."""
    import zlib
    path = ck / f'snapshot_iter_{iteration}.rank{rank}.npz'
    with numpy.load(str(path)) as z:
        arrays = {k: z[k].copy() for k in z.files}
    name = sorted(k for k in arrays if k.endswith('/W'))[0]
    arrays[name].flat[3] = value
    with open(str(path), 'wb') as f:
        numpy.savez(f, **arrays)
    record = {'bytes': path.stat().st_size, 'crc32': zlib.crc32(path.read_bytes())}
    for manifest in (ck / 'latest.json', ck / f'manifest_iter_{iteration}.json'):
        data = json.loads(manifest.read_text())
        if data['iteration'] == iteration:
            data['checks'][path.name] = record
            manifest.write_text(json.dumps(data))
    return name


def test_auto_resume_skips_a_checkpoint_holding_nan(tmp_path):
    ck = tmp_path / 'ck'
    first = train(2, tmp_path / 'o1', ck, '--epoch', '1')  # checkpoints 4 and 8 kept
    assert first.returncode == 0, first.stderr[-3000:]
    name = _rewrite_with_nan(ck, 8, 1)
    again = train(2, tmp_path / 'o3', ck, '--auto-resume', '--epoch', '1')
    assert again.returncode == 0, again.stderr[-3000:]
    assert ('snapshot_iter_8.rank1.npz holds 1 NaN/Inf value(s), the first '
            f'in {name}') in again.stdout, again.stdout[-3000:]
    assert f'resumed from {ck} at iteration 4' in again.stdout, again.stdout[-3000:]


def test_resume_on_another_rank_count_4_2_3(tmp_path):
    # One checkpoint directory through 4, 2 and 3 ranks, global batch 120 throughout (30,
    # 60, 40 per rank), 20 iterations an epoch: fewer ranks, then more that do not divide
    # the old count (what the rules do at every pair of counts, with no job:
    # tests/extensions/checkpoint/test_resharding.py and test_rules.py). Resumed at the epoch it was
    # written in, a job ends at once: its parameters are the stored ones, bit for bit. Resumed with
    # one more epoch, it trains on every rank.
    ck = tmp_path / 'ck'

    def run(nprocs, epochs, name, *extra, batch=None):
        return run_mpi(nprocs, [EXAMPLE, '--out', str(tmp_path / name), '--checkpoint-dir',
                                str(ck), '--limit', '2400', '--unit', '50',
                                '--checkpoint-interval', '10', '--epoch', str(epochs),
                                '--batchsize', str(batch or 120 // nprocs)] + list(extra),
                       timeout=300)
    first = run(4, 1, 'p4')
    assert first.returncode == 0, first.stderr[-3000:]
    previous = params(tmp_path / 'p4')
    for (old, new), epochs in (((4, 2), 1), ((2, 3), 2)):
        # Started with the script's per-rank batch (100): resized to keep the global one.
        at = run(new, epochs, f'at{new}', '--auto-resume', batch=100)
        assert at.returncode == 0, at.stderr[-3000:]
        assert f'written by {old} ranks, on {new}' in at.stdout, at.stdout[-2000:]
        assert (f'the global batch of 120 kept: {120 // new} per rank instead '
                f'of {120 // old}') in at.stdout, at.stdout[-2000:]
        resumed = params(tmp_path / f'at{new}')
        assert all(numpy.array_equal(previous[k], resumed[k]) for k in previous), (old, new)
        on = run(new, epochs + 1, f'on{new}', '--auto-resume')
        assert on.returncode == 0, on.stderr[-3000:]
        assert f'the global batch of 120 kept ({120 // new} per rank, as started)' \
            in on.stdout, on.stdout[-2000:]
        manifest = json.loads((ck / 'latest.json').read_text())
        assert (manifest['iteration'], manifest['ranks']) == (20 * (epochs + 1), new), manifest
        previous = params(tmp_path / f'on{new}')
        assert all(numpy.isfinite(v).all() for v in previous.values())
    # The global batch changed instead (--resume-batch scale): each of 2 ranks keeps the 30
    # it was started with, and Adam's alpha follows the linear rule, 120 -> 60.
    scaled = run(2, 3, 'scaled', '--auto-resume', '--resume-batch', 'scale', batch=30)
    assert scaled.returncode == 0, scaled.stderr[-3000:]
    assert line_with(scaled.stdout, 'global batch', '120 (3 x 40)', '60 (2 x 30',
                     'alpha 0.001 -> 0.0005', 'linear_scaling'), scaled.stdout[-2000:]
    # (Another optimizer's state refused: tests/extensions/checkpoint/test_extension.py.)
    # A stored replica that differs (rank 2 of the last 3-rank checkpoint, one weight): no
    # replica can stand for the others, and the refusal names the ranks and the array.
    last = json.loads((ck / 'latest.json').read_text())['iteration']
    name = _rewrite_with_nan(ck, last, 2, value=0.125)
    refused = run(2, 9, 'bad', '--resume')
    assert refused.returncode != 0
    assert line_with(refused.stderr, '3 stored ranks', 'ranks 0, 1 / 2 agree', name), \
        refused.stderr[-3000:]
