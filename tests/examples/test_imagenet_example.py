"""The ImageNet example on real ranks and real JPEGs (the Fashion-MNIST subset builder's)."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tracemalloc

import numpy
import pytest

from conftest import ROOT, run_mpi

from chainermn_torus.compute.onednn import binding
from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR

pytestmark = pytest.mark.example  # runs an example end to end: full tier

EXAMPLE = os.path.join(ROOT, 'examples', 'imagenet', 'train_imagenet.py')
BUILDER = os.path.join(ROOT, 'scripts', 'make_imagenet_subset.py')
PHASES = ('data', 'forward_backward', 'allreduce', 'update', 'iteration')

needs_data = pytest.mark.skipif(
    not os.path.isdir(DEFAULT_MNIST_DIR),
    reason='Debian package dataset-fashion-mnist is not installed (make setup installs it)')


@pytest.fixture(scope='module')
def lists(tmp_path_factory):
    out = str(tmp_path_factory.mktemp('imagenet') / 'fmnist')
    proc = subprocess.run([sys.executable, BUILDER, '--out', out, '--per-class', '4',
                           '--val-per-class', '2', '--size', '40'],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [os.path.join(out, 'train.txt'), os.path.join(out, 'val.txt')]


def run_example(lists, out, loader, *extra, nprocs=2):
    argv = [EXAMPLE] + lists + ['--arch', 'tiny', '--loader', loader, '--epoch', '1',
                                '--crop-size', '32', '--batchsize', '5', '--out', str(out)]
    return run_mpi(nprocs, argv + list(extra), timeout=180)


def check_outputs(proc, out, loader, nprocs=2):
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.load(open(str(out / 'summary.json')))
    breakdown = json.load(open(str(out / 'breakdown.json')))
    assert summary['loader'] == loader == breakdown['loader']
    assert summary['ranks'] == nprocs and summary['arch'] == 'tiny'
    assert summary['n_classes'] == 10 and summary['crop_size'] == 32
    # 40 images over 2 ranks, 5 per batch: 4 iterations in the epoch
    assert summary['iterations'] == 4
    assert 0.0 <= summary['test_accuracy'] <= 1.0 and numpy.isfinite(summary['test_loss'])
    assert summary['iterations_per_second'] > 0
    assert len(summary['per_rank_iterations_per_second']) == nprocs
    # the first (broadcast) step and the first averaging (set-up) step left out
    assert breakdown['iterations_measured'] == 2
    assert len(breakdown['per_rank_median_ms']) == nprocs
    for medians in [breakdown['median_ms']] + breakdown['per_rank_median_ms']:
        assert set(medians) == set(PHASES)
        assert all(medians[p] >= 0 for p in PHASES)
        assert medians['allreduce'] > 0 and medians['forward_backward'] > 0
        parts = medians['data'] + medians['forward_backward'] + medians['allreduce'] \
            + medians['update']
        assert parts == pytest.approx(medians['iteration'], rel=0.5)
    # UCX (MPICH's transport) may print warnings at MPI_Finalize, after the example's lines
    last = [line for line in proc.stdout.splitlines()
            if line.strip() and ' UCX ' not in line][-1]
    assert last.startswith('iterations/s: '), proc.stdout[-2000:]
    assert float(last.split()[1]) == pytest.approx(summary['iterations_per_second'], rel=0.01)
    return summary, breakdown


# Chainer's SerialIterator: the first run of test_imagenet_example_checkpoints_and_resumes
# (the same options and checks, with checkpoints written).
@needs_data
@pytest.mark.parametrize('loader', ['multiprocess'])
def test_imagenet_example_trains_with_chainer_loaders(lists, tmp_path, loader):
    proc = run_example(lists, tmp_path, loader, '--loader-processes', '1')
    summary, _ = check_outputs(proc, tmp_path, loader)
    assert summary['loader_processes'] == (None if loader == 'serial' else 1)
    # Only ours and serial give bit-identical runs for a seed: multiprocess says it does not.
    assert ('runs with the same seed are not bit-identical' in proc.stdout) == \
        (loader == 'multiprocess'), proc.stdout[-2000:]


@needs_data
@pytest.mark.parametrize('affinity', ['auto', 'none'])
def test_imagenet_example_trains_with_our_loader(lists, tmp_path, affinity):
    # auto: same-core on this kind of machine (no SMT), pinned; none: nothing pinned.
    proc = run_example(lists, tmp_path, 'ours', '--loader-processes', '1',
                       '--affinity', affinity)
    summary, _ = check_outputs(proc, tmp_path, 'ours')
    assert summary['affinity'] == affinity and summary['loader_processes'] == 1
    if affinity == 'auto':
        assert 'affinity ' in proc.stdout and 'compute on CPUs' in proc.stdout


@needs_data
def test_imagenet_example_impossible_affinity_says_what_the_machine_has(lists, tmp_path):
    # 2 ranks on a machine with one hardware thread per core: 'sibling' cannot work.
    from chainermn_torus.loader import Topology
    if Topology.from_sysfs().smt > 1:
        pytest.skip('this machine has SMT siblings, so the sibling policy is possible here')
    proc = run_example(lists, tmp_path, "ours", "--affinity", "sibling")
    assert proc.returncode != 0
    assert "'sibling' cannot be satisfied" in proc.stdout + proc.stderr


@needs_data
def test_imagenet_example_bad_list_line_fails_clearly_said_once(lists, tmp_path):
    bad = tmp_path / 'train.txt'
    with open(lists[0]) as f:
        lines = f.readlines()
    lines[2] = lines[2].split()[0] + ' three\n'
    bad.write_text(''.join(lines))
    root = os.path.dirname(lists[0])
    proc = run_mpi(2, [EXAMPLE, str(bad), lists[1], '--root', root, '--arch', 'tiny',
                       '--loader', 'serial', '--epoch', '1', '--out', str(tmp_path / 'out')],
                   timeout=120)
    assert proc.returncode != 0
    # every rank stops; rank 0 says which file and line, once for the job
    assert proc.stderr.count(f'{bad}: line 3') == 1, proc.stderr
    assert "label 'three' is not an integer" in proc.stderr


@needs_data
def test_imagenet_example_corrupt_jpeg_stops_multiprocess_loader_or_is_skipped(lists, tmp_path):
    # Chainer's MultiprocessIterator alone would hang here (its prefetch thread dies).
    data = tmp_path / 'data'
    shutil.copytree(os.path.dirname(lists[0]), str(data))
    corrupt = data / 'train' / 'bag' / '0001.JPEG'
    corrupt.write_bytes(b'not a JPEG')
    argv = [str(data / 'train.txt'), str(data / 'val.txt')]
    proc = run_example(argv, tmp_path / 'out', 'multiprocess', '--loader-processes', '1')
    assert proc.returncode != 0
    assert f'cannot decode image {corrupt}' in proc.stdout + proc.stderr, \
        proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = run_example(argv, tmp_path / 'skip', 'serial', '--skip-corrupt')
    check_outputs(proc, tmp_path / 'skip', 'serial')
    assert 'skipped (skip_corrupt=True)' in proc.stderr
    # Our loader processes: the file and the option in one line, not a loader's traceback
    # (52 lines).
    proc = run_example(argv, tmp_path / 'ours', 'ours', '--loader-processes', '1')
    assert proc.returncode != 0
    said = [line for line in proc.stderr.splitlines() if 'cannot decode image' in line]
    assert len(said) == 1 and str(corrupt) in said[0] and '--skip-corrupt' in said[0], \
        proc.stderr[-3000:]
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]


def test_resnet50_arch_builds_and_classifies():
    spec = importlib.util.spec_from_file_location('train_imagenet', EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)  # importing the example touches no MPI
    model = example.build_model('resnet50', 7)
    names = [name for name, _ in model.namedparams()]
    assert '/predictor/trunk/fc6/W' in names
    assert model.predictor.trunk.fc6.W.shape == (7, 2048)
    import chainer
    with chainer.using_config('train', False), chainer.no_backprop_mode():
        y = model.predictor(numpy.zeros((1, 3, 64, 64), numpy.float32))
    assert y.shape == (1, 7)
    assert example.parse_args(['t.txt', 'v.txt', '--arch', 'resnet50']).crop_size == 224
    assert example.parse_args(['t.txt', 'v.txt', '--arch', 'tiny']).crop_size == 64


def _example():
    spec = importlib.util.spec_from_file_location('train_imagenet', EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def test_a_huge_label_is_named_in_memory_of_the_images_not_the_label():
    # Before: a label of 10**9 built a list over range(10**9 + 1) and was OOM-killed.
    example = _example()
    pairs = [('a.jpg', 0), ('b.jpg', 1), ('c.jpg', 10 ** 9), ('d.jpg', 2)]
    args = example.parse_args(['t.txt', 'v.txt', '--arch', 'tiny'])
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as e:
            example.check_labels(args, pairs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 'labels go up to 1000000000 (c.jpg) but 999,999,997 of the classes below have no ' \
        'image (e.g. 3, 4, 5, 6, 7)' in str(e.value) and peak < 1 << 20, (str(e.value), peak)


def test_label_typo_and_bad_mean_files_are_named(tmp_path):
    example = _example()
    pairs = [('a.jpg', 0), ('b.jpg', 1), ('c.jpg', 57), ('d.jpg', 2)]  # 57: a typo for 5
    args = example.parse_args(['t.txt', 'v.txt', '--arch', 'tiny'])
    with pytest.raises(ValueError, match=r't.txt: labels go up to 57 \(c.jpg\) but 54 of the '
                                         r'classes below have no image \(e.g. 3, 4, 5'):
        example.check_labels(args, pairs)
    args = example.parse_args(['t.txt', 'v.txt', '--arch', 'tiny', '--n-classes', '100'])
    assert example.check_labels(args, pairs) == 100
    args = example.parse_args(['t.txt', 'v.txt', '--arch', 'tiny', '--n-classes', '10'])
    with pytest.raises(ValueError, match='label 57 .* is not below --n-classes 10'):
        example.check_labels(args, pairs)
    text = tmp_path / 'mean.txt'
    text.write_text('128 128 128')
    with pytest.raises(ValueError, match='mean.txt: not a mean image written by compute_mean'):
        example.load_mean(str(text))
    flat = tmp_path / 'flat.npy'
    numpy.save(str(flat), numpy.zeros((32, 32), numpy.float32))
    with pytest.raises(ValueError, match=r'flat.npy: a mean image has shape \(3, H, W\), this '
                                         r'holds \(32, 32\)'):
        example.load_mean(str(flat))


@pytest.mark.parametrize('option, value', [
    ('--epoch', '0'), ('--batchsize', '0'), ('--n-classes', '0'), ('--limit', '0'),
    ('--crop-size', '-3'), ('--val-batchsize', '0'), ('--loader-processes', '0'),
    # It trained to chance with exit code 0 on a negative learning rate (issue 34).
    ('--lr', '-1'), ('--lr', '0')])
def test_imagenet_example_checks_its_arguments_as_mnist_does(option, value, capsys):
    with pytest.raises(SystemExit):
        _example().parse_args(['t.txt', 'v.txt', option, value])
    err = capsys.readouterr().err
    assert f'argument {option}' in err and repr(value) in err, err


# Our loader's resume (the iterator continues where it was, at 2 ranks): the bit-identical
# test below, whose killed run resumes at iteration 4 and ends where an uninterrupted one
# does.
@needs_data
@pytest.mark.parametrize('loader', ['serial'])
def test_imagenet_example_checkpoints_and_resumes(lists, tmp_path, loader):
    ck = tmp_path / 'ck'
    first = run_example(lists, tmp_path / 'a', loader, '--checkpoint-dir', str(ck),
                        '--checkpoint-interval', '2', '--loader-processes', '1')
    summary, _ = check_outputs(first, tmp_path / 'a', loader)  # it trains with Chainer's loader
    assert summary['loader_processes'] is None
    assert 'not bit-identical' not in first.stdout, first.stdout[-2000:]
    manifest = json.loads((ck / 'latest.json').read_text())
    assert manifest['iteration'] == 4 and manifest['ranks'] == 2
    # One more epoch from the checkpoint: the iterator continues where it was.
    again = run_example(lists, tmp_path / 'b', loader, '--checkpoint-dir', str(ck), '--resume',
                        '--loader-processes', '1', '--epoch', '2')
    assert again.returncode == 0, again.stderr[-3000:]
    assert f'resumed from {ck} at iteration 4' in again.stdout
    assert json.loads((ck / 'latest.json').read_text())['iteration'] == 8


def _state(ck, iteration, rank):
    """A rank's checkpointed trainer state, less what records wall-clock time."""
    path = ck / f'snapshot_iter_{iteration}.rank{rank}.npz'
    with numpy.load(str(path)) as z:
        return {k: z[k].copy() for k in z.files
                if k not in ('_snapshot_elapsed_time', 'extensions/LogReport/_log')}


def _differences(a, b):
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
    return sorted(k for k in a if not numpy.array_equal(a[k], b[k]))


# oneDNN where it is installed (the default, auto), said: the runs below are on it.
COMPUTE = 'onednn' if binding.available() else 'numpy'


@needs_data
def test_imagenet_runs_are_bit_identical_at_two_ranks_and_after_kill_and_resume(lists, tmp_path):
    # Crops are keyed by (seed, epoch, image), not by the process drawing them: before, rank
    # 1 (and every loader worker) drew from fresh entropy and no two runs were alike.
    def run(name, *extra, env=None, fault=None):
        wrap = [os.path.join(ROOT, 'tests', 'mpi_workers', 'checkpoint_fault.py'), fault] \
            if fault else []
        argv = wrap + [EXAMPLE] + lists + [
            '--arch', 'tiny', '--loader', 'ours', '--loader-processes', '1', '--epoch', '2',
            '--crop-size', '32', '--batchsize', '5', '--out', str(tmp_path / name),
            '--checkpoint-dir', str(tmp_path / ('ck-' + name)), '--checkpoint-interval', '2']
        return run_mpi(2, argv + list(extra), timeout=180,
                       env=dict(env or {}, CHAINERMN_TORUS_COMPUTE=COMPUTE))
    for name in ('a', 'b'):
        proc = run(name)
        assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        a, b = _state(tmp_path / 'ck-a', 8, rank), _state(tmp_path / 'ck-b', 8, rank)
        assert any('predictor' in k for k in a)
        assert _differences(a, b) == [], rank
    crashed = run('c', fault='after:4')
    assert crashed.returncode != 0
    resumed = run('c', '--resume')
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert 'resumed from {} at iteration 4'.format(tmp_path / 'ck-c') in resumed.stdout
    for rank in (0, 1):
        a, c = _state(tmp_path / 'ck-a', 8, rank), _state(tmp_path / 'ck-c', 8, rank)
        assert _differences(a, c) == [], rank


@needs_data
@pytest.mark.skipif(not binding.available(), reason='oneDNN is not installed for this Python '
                    '(make setup installs onednn-cpu-gomp on x86-64)')
def test_imagenet_runs_on_onednn_are_bit_identical_at_one_rank(lists, tmp_path):
    # One rank, two OpenMP threads on oneDNN's primitives (the two-rank test has one each).
    def run(name):
        argv = [EXAMPLE] + lists + [
            '--arch', 'tiny', '--loader', 'serial', '--epoch', '1', '--crop-size', '32',
            '--batchsize', '5', '--out', str(tmp_path / name), '--checkpoint-dir',
            str(tmp_path / ('ck-' + name)), '--checkpoint-interval', '4']
        proc = run_mpi(1, argv, timeout=180, env={'CHAINERMN_TORUS_COMPUTE': 'onednn'})
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert 'compute: oneDNN 3.' in proc.stdout
    run('a')
    run('b')
    a, b = _state(tmp_path / 'ck-a', 4, 0), _state(tmp_path / 'ck-b', 4, 0)
    assert any('predictor' in k for k in a)
    assert _differences(a, b) == []


@needs_data
def test_virtual_ranks_train_tiny_imagenet_to_the_same_bits_on_4_and_2_processes(lists,
                                                                                  tmp_path):
    # Issue 85: BatchNormalization's running statistics, the loader processes and the crops
    # of each virtual rank are its own, wherever it runs; one thread a rank (numba's and
    # oneDNN's sums split over threads), said at start.
    models, summaries, logs = {}, {}, {}
    for nprocs in (4, 2):
        out = tmp_path / str(nprocs)
        argv = [EXAMPLE] + lists + [
            '--arch', 'tiny', '--loader', 'ours', '--loader-processes', '1', '--epoch', '1',
            '--crop-size', '32', '--batchsize', '5', '--virtual-ranks', '4', '--out', str(out)]
        proc = run_mpi(nprocs, argv, timeout=180,
                       env={'CHAINERMN_TORUS_COMPUTE': COMPUTE, 'CHAINERMN_TORUS_THREADS': '1'})
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert f'4 virtual ranks on {nprocs} processes' in proc.stdout, proc.stdout[-2000:]
        assert 'virtual ranks: computed with 1 thread a rank' in proc.stdout
        with numpy.load(str(out / 'model_final.npz')) as f:
            models[nprocs] = {k: f[k].tobytes() for k in f.files}
        summaries[nprocs] = json.load(open(str(out / 'summary.json')))
        logs[nprocs] = [{k: v for k, v in e.items() if k != 'elapsed_time'}
                        for e in json.load(open(str(out / 'log')))]
    assert any(k.endswith('avg_mean') for k in models[4]), sorted(models[4])
    assert models[2] == models[4]
    assert logs[2] == logs[4] and len(logs[4]) == 1
    for key in ('test_loss', 'test_accuracy', 'iterations'):
        assert summaries[2][key] == summaries[4][key], key
    assert summaries[4]['virtual_ranks'] == 4 and summaries[2]['ranks'] == 2
