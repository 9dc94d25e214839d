"""``python -m chainermn_torus.run --virtual-ranks V``: unchanged scripts computed as V ranks,
the same bits on any number of processes (issue 85).

ChainerMN's MNIST script (its scatter_dataset, unseeded, its multi-node evaluator, rank 0's
LogReport) and a plain Chainer script under --data-parallel each run on P = V processes
and on fewer, with different communicators: the logged losses and accuracies are the same
to every digit and the saved models the same bits.
"""
import json
import os

import numpy
import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from conftest import ROOT, line_with, run_mpi

SCRIPTS = os.path.join(ROOT, 'tests', 'unchanged')
pytestmark = pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                                reason='Debian package dataset-fashion-mnist is not installed '
                                       '(make setup installs it)')


def _job(nprocs, options, script, out, dataset_root, *extra, epochs=2):
    argv = ['-m', 'chainermn_torus.run', '--threads', '1'] + options + [
        os.path.join(SCRIPTS, script), '--epoch', str(epochs), '--limit', '1200', '--unit',
        '50', '--out', str(out)] + list(extra)
    return run_mpi(nprocs, argv, timeout=300, env={'CHAINER_DATASET_ROOT': dataset_root})


def _logged(out):
    """Every logged value but the wall time, each epoch."""
    log = json.loads((out / 'log').read_text())
    return [{k: v for k, v in entry.items() if k != 'elapsed_time'} for entry in log]


def _model(out):
    with numpy.load(str(out / 'model_final.npz')) as f:
        return {k: f[k] for k in f.files}


def _same_bits(a, b):
    return sorted(a) == sorted(b) and all(
        a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes() for k in a)


def _lines(proc):
    return '\n'.join(line for line in proc.stdout.splitlines()
                     if line.startswith('chainermn_torus.run: '))


@pytest.mark.slow
def test_chainermn_script_unchanged_same_log_and_model_on_4_and_2_processes(tmp_path,
                                                                             dataset_root):
    # ChainerMN's script seeds nothing and asks for 'naive': the launcher seeds numpy and
    # the scatter with the run's seed (0), and --communicator gives an exact-sum one.
    runs = {}
    for nprocs, comm in ((4, 'rsap'), (2, 'pure_allreduce')):
        out = tmp_path / f'p{nprocs}'
        proc = _job(nprocs, ['--virtual-ranks', '4', '--communicator', comm],
                    'chainermn_mnist.py', out, dataset_root)
        assert proc.returncode == 0, proc.stderr[-3000:]
        text = _lines(proc)
        spread = 'one each' if nprocs == 4 else '2 each'
        assert line_with(text, '--virtual-ranks:', f'4 virtual ranks on {nprocs} processes',
                         spread, '300-example shard', 'batch 100'), text
        assert line_with(text, 'scatter_dataset', 'virtual ranks 0' + (
            '' if nprocs == 4 else '-1'), 'seed 0'), text
        assert line_with(text, 'Evaluator', 'virtual-rank order'), text
        assert line_with(text, 'exact sum', f'4 virtual ranks on {nprocs} processes'), text
        runs[nprocs] = (_logged(out), _model(out))
    (log4, model4), (log2, model2) = runs[4], runs[2]
    assert len(log4) == 2 and log4 == log2   # every logged digit: losses, accuracies
    assert _same_bits(model4, model2)
    assert log4[-1]['validation/main/accuracy'] > 0.2, log4   # it learned: above chance


@pytest.mark.slow
def test_plain_script_data_parallel_same_bits_on_3_and_2_processes(tmp_path, dataset_root):
    runs = []
    for nprocs in (3, 2):
        out = tmp_path / f'p{nprocs}'
        proc = _job(nprocs, ['--data-parallel', '--virtual-ranks', '3'], 'chainer_mnist.py',
                    out, dataset_root, epochs=1)
        assert proc.returncode == 0, proc.stderr[-3000:]
        text = _lines(proc)
        assert line_with(text, '--data-parallel', '400 per rank', '300 in all on 3 ranks'), text
        assert line_with(text, '--virtual-ranks:', f'3 virtual ranks on {nprocs}'), text
        runs.append((_logged(out), _model(out)))
    assert runs[0][0] == runs[1][0]
    assert _same_bits(runs[0][1], runs[1][1])


@pytest.mark.parametrize('nprocs, options, script, said', [
    # ChainerMN's own communicator sums in float32 in its order: named, with the way out
    (1, ['--virtual-ranks', '2'], 'chainermn_mnist.py',
     "--virtual-ranks 2 asks for the exact sum, and communicator 'naive' is ChainerMN's"),
    (2, ['--virtual-ranks', '1', '--communicator', 'rsap'], 'chainermn_mnist.py',
     "--virtual-ranks 1 is fewer than the job's 2 processes"),
    # a plain script's iterator has no scattered shards to split
    (1, ['--virtual-ranks', '2'], 'chainer_mnist.py',
     'did not come from chainermn.scatter_dataset'),
    (1, ['--virtual-ranks', '2', '--data-parallel', '--loader', 'serial'], 'chainer_mnist.py',
     '--virtual-ranks 2 with --loader: not available'),
])
def test_what_virtual_ranks_cannot_split_is_refused_in_one_line(nprocs, options, script,
                                                                 said, tmp_path, dataset_root):
    proc = _job(nprocs, options, script, tmp_path / 'out', dataset_root)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert text.count(said) == 1, text[-3000:]
    assert 'Traceback' not in text, text[-3000:]


# A ChainerMN-style script whose model communicates inside its forward (MultiNodeBatch-
# Normalization), or which calls a model-parallel function itself.
_MODEL_PARALLEL = """
import chainer, chainer.links as L, chainermn, numpy, sys
from chainer import training
comm = chainermn.create_communicator('naive')
if sys.argv[1] == 'mnbn':
    model = L.Classifier(chainer.Sequential(L.Linear(4, 3),
                                            chainermn.links.MultiNodeBatchNormalization(3, comm)))
else:
    model = L.Classifier(L.Linear(4, 3))
    chainermn.functions.bcast(comm, chainer.Variable(numpy.ones(2, numpy.float32)))
opt = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(), comm).setup(model)
data = chainer.datasets.TupleDataset(numpy.ones((20, 4), numpy.float32),
                                     numpy.zeros(20, numpy.int32))
data = chainermn.scatter_dataset(data if comm.rank == 0 else None, comm, shuffle=True)
it = chainer.iterators.SerialIterator(data, 5)
training.Trainer(training.StandardUpdater(it, opt), (1, 'epoch')).run()
"""


@pytest.mark.parametrize('what, said', [
    ('custom', 'this script updates its optimizer itself (a custom training loop'),
    ('mnbn', "the model holds ChainerMN's MultiNodeBatchNormalization"),
    ('bcast', 'the script calls chainermn.functions.bcast'),
])
def test_what_a_process_cannot_run_as_several_virtual_ranks_is_named(what, said, tmp_path):
    script = tmp_path / 'script.py'
    script.write_text(_MODEL_PARALLEL)
    target = [os.path.join(SCRIPTS, 'custom_loop.py')] if what == 'custom' else \
        [str(script), what]
    # one process holding both virtual ranks: the refusals come before any sum
    proc = run_mpi(1, ['-m', 'chainermn_torus.run', '--virtual-ranks', '2', '--communicator',
                       'rsap', '--threads', '1'] + target, timeout=120)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert text.count(said) == 1, text[-3000:]
    assert 'Traceback' not in text, text[-3000:]
