"""The MNIST example on real ranks and real (Fashion-)MNIST data."""
import json
import os

import numpy
import pytest

from conftest import ROOT, run_mpi

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR

pytestmark = pytest.mark.example  # runs an example end to end: full tier

EXAMPLE = os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py')


@pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist is not installed '
                           '(make setup installs it)')
@pytest.mark.parametrize('communicator,nprocs', [('rsap', 2), ('rsaa', 3)])
def test_mnist_example_learns(tmp_path, communicator, nprocs):
    proc = run_mpi(nprocs, [EXAMPLE, '--communicator', communicator, '--epoch', '2',
                            '--limit', '3000', '--out', str(tmp_path)], timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.load(open(str(tmp_path / 'summary.json')))
    assert summary['communicator'] == communicator and summary['ranks'] == nprocs
    # 3000 images, 2 epochs: far above chance (0.1) if gradients are averaged right.
    assert summary['test_accuracy'] > 0.65, summary
    assert summary['gradient_communication_calls'] > 0
    assert 'test accuracy:' in proc.stdout and 'gradient communication:' in proc.stdout


@pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist is not installed '
                           '(make setup installs it)')
def test_with_the_exact_sum_every_communicator_trains_to_the_same_bits(tmp_path):
    # P = 3: float32 sums in different orders (without --exact-sum pure_allreduce's model
    # differed from rsap's in 5 of 6 arrays here). rsap in node memory (3x1), pure_allreduce
    # (rsaa: the virtual ranks' test below).
    models = {}
    for name, extra in (('rsap', []), ('pure_allreduce', [])):
        out = tmp_path / name
        proc = run_mpi(3, [EXAMPLE, '--communicator', name, '--exact-sum', '--epoch', '1',
                           '--limit', '1500', '--out', str(out)] + extra, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert 'exact sum (gradients summed as 64-bit integers)' in proc.stdout
        with numpy.load(str(out / 'model_final.npz')) as f:
            models[name] = {k: f[k].tobytes() for k in f.files}
    assert len(models['rsap']) == 6
    assert models['pure_allreduce'] == models['rsap']
    # ChainerMN's naive cannot: refused in one line before anything is made
    proc = run_mpi(2, [EXAMPLE, '--communicator', 'naive', '--exact-sum', '--epoch', '1',
                       '--limit', '400', '--out', str(tmp_path / 'naive')], timeout=120)
    assert proc.returncode != 0
    said = [line for line in proc.stderr.splitlines() if 'asks for the exact sum' in line]
    assert said and "communicator 'naive' is ChainerMN's" in said[0], proc.stderr[-2000:]


@pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist is not installed '
                           '(make setup installs it)')
# An uneven spread (V = 3 on 2 processes: 2 + 1) is the launcher test's
# (tests/launch/test_launcher_virtual_ranks.py) and the communicator's (V = 6 on 4).
@pytest.mark.parametrize('virtual,runs', [
    (4, [(4, 'rsap'), (2, 'pure_allreduce'), (1, 'rsap')]),
], ids=['V4-on-4-2-1'])
def test_virtual_ranks_train_to_the_same_bits_on_any_number_of_processes(tmp_path, virtual,
                                                                        runs):
    models, summaries = {}, {}
    for nprocs, name in runs:
        out = tmp_path / f'{nprocs}-{name}'
        proc = run_mpi(nprocs, [EXAMPLE, '--communicator', name, '--virtual-ranks',
                                str(virtual), '--epoch', '1', '--limit', '1200',
                                '--batchsize', '50', '--threads', '1', '--out', str(out)],
                       timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f'{virtual} virtual ranks on {nprocs} process' in proc.stdout, proc.stdout[-2000:]
        with numpy.load(str(out / 'model_final.npz')) as f:
            models[nprocs] = {k: f[k].tobytes() for k in f.files}
        summaries[nprocs] = json.load(open(str(out / 'summary.json')))
    first = runs[0][0]
    assert len(models[first]) == 6
    for nprocs, _ in runs[1:]:
        assert models[nprocs] == models[first], f'{nprocs} processes: other bits'
    # 1200 images over V virtual ranks of 50: every run made the same number of updates
    assert len({s['gradient_communication_calls'] for s in summaries.values()}) == 1, summaries
    assert all(s['virtual_ranks'] == virtual for s in summaries.values())
    # the evaluation too: every virtual rank's test shard, the mean in virtual-rank order
    assert len({(s['test_accuracy'], s['test_loss']) for s in summaries.values()}) == 1, \
        summaries


@pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist is not installed '
                           '(make setup installs it)')
@pytest.mark.parametrize('flags,nprocs,min_accuracy', [
    (['--double-buffering', '--fp16-allreduce', '--check-finite', '--warmup-epochs', '1'], 2,
     0.6),
    # 1-step-stale momentum SGD learns slowly in 20 updates (docs/optimizer.md, double buffering):
    # well above chance (0.1) is what 2 epochs of 1000 images per rank show.
    (['--optimizer', 'momentum', '--lr', '0.05', '--double-buffering', '--communicator',
      'pure_allreduce'], 3, 0.25),
    (['--stock', '--no-fused', '--no-flush-denormals', '--communicator', 'naive'], 2, 0.6),
], ids=['db-fp16-warmup', 'momentum-db-3ranks', 'stock-chainermn'])
def test_mnist_example_cpu_optimizer_flags(tmp_path, flags, nprocs, min_accuracy):
    proc = run_mpi(nprocs, [EXAMPLE, '--epoch', '2', '--limit', '3000', '--out', str(tmp_path)]
                   + flags, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.load(open(str(tmp_path / 'summary.json')))
    assert summary['double_buffering'] == ('--double-buffering' in flags)
    assert summary['fp16_allreduce'] == ('--fp16-allreduce' in flags)
    assert summary['stock'] == ('--stock' in flags)
    assert summary['test_accuracy'] > min_accuracy, summary
    if '--double-buffering' in flags:
        # the all-reduce ran in the background thread, once per update after the broadcast
        assert summary['gradient_communication_calls'] > 0
        assert 'waited for it' in proc.stdout
    assert 'BLAS/OpenMP threads' in proc.stdout
    # Every RMA window freed before MPI_Finalize: float16's windows left to it made the
    # MPICH wheel's UCX print 6 warnings ("not returned to mpool ucp_rkeys").
    assert 'UCX' not in proc.stdout + proc.stderr, proc.stderr[-2000:]


def test_mnist_example_missing_data_dir_stops_every_rank_said_once(tmp_path):
    missing = str(tmp_path / 'no-data-here')
    proc = run_mpi(2, [EXAMPLE, '--data-dir', missing, '--epoch', '1',
                       '--out', str(tmp_path / 'out')], timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.count(missing) == 1, proc.stderr  # which path, once for the job
    assert 'dataset-fashion-mnist' in proc.stderr


@pytest.mark.parametrize('option, value, message', [
    ('--epoch', '0', "argument --epoch/-e: must be an integer >= 1, got '0'"),
    ('--unit', '0', "argument --unit/-u: must be an integer >= 1, got '0'"),
    ('--batchsize', '-3', "argument --batchsize/-b: must be an integer >= 1, got '-3'"),
    ('--lr', '0', "argument --lr: must be a finite number > 0, got '0'"),
    ('--seed', '-1', "argument --seed: must be an integer from 0 to 2**32 - 1"),
])
def test_mnist_example_refuses_bad_numbers_before_starting(option, value, message, capsys,
                                                          monkeypatch):
    # argparse's error, before MPI or the data: not a ZeroDivisionError after loading. In
    # this process (the example's main() parses its arguments first: no interpreter start).
    import runpy
    import sys
    monkeypatch.setattr(sys, 'argv', [EXAMPLE, option, value])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(EXAMPLE, run_name='__main__')
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err, err


def test_mnist_example_says_its_usage_once_for_the_job_not_once_per_rank():
    proc = run_mpi(3, [EXAMPLE, '--seed', '-1'], timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.count('usage:') == 1, proc.stderr  # it was 3 at -n 3
    assert proc.stderr.count("argument --seed: must be") == 1, proc.stderr
    assert 'Traceback' not in proc.stderr


@pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist is not installed '
                           '(make setup installs it)')
def test_mnist_example_refuses_a_batch_larger_than_a_ranks_data(tmp_path):
    # --batchsize 100000000 was accepted: a batch of 10^8 images built from the shard until
    # the machine ran out of memory, then 85 lines and two tracebacks.
    proc = run_mpi(2, [EXAMPLE, '--batchsize', '100000000', '--limit', '400', '--epoch', '1',
                       '--out', str(tmp_path / 'out')], timeout=120)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[0] == ('--batchsize 100000000 is more than the 200 training images each of '
                        'the 2 rank(s) gets (400 in all, --limit 400): at most 200'), lines
    assert 'Traceback' not in proc.stderr and len(lines) <= 2, lines  # and MPI's abort line


@pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist is not installed '
                           '(make setup installs it)')
@pytest.mark.parametrize('nprocs', [1, 2])
def test_the_launchers_evaluation_loaders_reach_the_final_evaluation(tmp_path, nprocs):
    # --loader ours --loader-eval: the Trainer finalized the evaluation's loader when training
    # ended, and the example's final evaluation died in its reset (IndexError, no accuracy).
    proc = run_mpi(nprocs, ['-m', 'chainermn_torus.run', '--loader', 'ours', '--loader-eval',
                            EXAMPLE, '--limit', '400', '--epoch', '1',
                            '--out', str(tmp_path / 'out')], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'test accuracy:' in proc.stdout and 'Traceback' not in proc.stderr
