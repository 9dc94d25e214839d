"""VirtualRanksUpdater with real ranks (tests/mpi_workers/virtual_train.py): a model with
BatchNormalization and dropout, trained as 4 virtual ranks, ends with the same parameters and
running statistics to every bit on 4, 2 and 1 processes: each virtual rank's batch, dropout
draws and statistics are its own, wherever it runs. One thread a rank: numba's
BatchNormalization sums split over threads, so 2 threads (the default of one process on 2
cores) gave other last bits. The evaluation over the virtual ranks gives the same means too."""
import json
import os

import numpy
import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from conftest import run_mpi, worker

pytestmark = pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                                reason='Debian package dataset-fashion-mnist is not installed '
                                       '(make setup installs it)')


def test_batch_normalization_and_dropout_train_to_the_same_bits_on_4_2_and_1_processes(
        tmp_path):
    models, evaluations = {}, {}
    for nprocs in (4, 2, 1):
        out = tmp_path / f'{nprocs}.npz'
        proc = run_mpi(nprocs, [worker('virtual_train.py'), '4', str(out)], timeout=300,
                       env={'CHAINERMN_TORUS_THREADS': '1'})
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        with numpy.load(str(out)) as f:
            models[nprocs] = {k: f[k].tobytes() for k in f.files}
        evaluations[nprocs] = json.loads((tmp_path / f'{nprocs}.npz.json').read_text())
    assert {'predictor/bn/avg_mean', 'predictor/bn/avg_var', 'predictor/l1/W'} <= set(models[4])
    assert models[2] == models[4] and models[1] == models[4]
    # The evaluation over virtual ranks, each with its own running statistics loaded: the
    # same means to every bit (one process evaluating all four with one's statistics would
    # not give them).
    assert set(evaluations[4]) == {'main/loss', 'main/accuracy'}, evaluations[4]
    assert evaluations[2] == evaluations[4] and evaluations[1] == evaluations[4], evaluations
