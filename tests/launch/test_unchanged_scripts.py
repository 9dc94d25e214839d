"""Unchanged scripts through the launcher: every substitution happens and is reported.

tests/unchanged/ holds scripts in the shape users have them (ChainerMN's MNIST example, a
custom training loop); they know nothing of chainermn_torus. Chainer's get_mnist() reads a
dataset cache filled from Debian's Fashion-MNIST (no download on a compute node).
"""
import json
import os
import re

import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR
from tests.other_user import as_other, needs_root, shared_dir  # NOQA
from conftest import ROOT, line_with, ranks, run_mpi

SCRIPTS = os.path.join(ROOT, 'tests', 'unchanged')
MNIST = os.path.join(SCRIPTS, 'chainermn_mnist.py')
pytestmark = pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                                reason='Debian package dataset-fashion-mnist is not installed '
                                       '(make setup installs it)')


def launch(nprocs, options, script_args, dataset_root, env=None):
    full_env = dict(env or {}, CHAINER_DATASET_ROOT=dataset_root)
    return run_mpi(nprocs, ['-m', 'chainermn_torus.run'] + options + script_args,
                   timeout=300, env=full_env)


def mnist_args(tmp_path, *extra):
    return [MNIST, '--epoch', '1', '--limit', '1200', '--unit', '50', '--out',
            str(tmp_path / 'out'), '--summary', str(tmp_path / 'summary.json')] + list(extra)


def report(proc):
    return [line for line in proc.stdout.splitlines() if line.startswith('chainermn_torus.run: ')]


# The fast tier's launcher tests are tests/launch/test_run.py's.
# 1-3 ranks: test_plain_chainer_script_runs_data_parallel. Here one job of 3 ranks and one
# of 2 (the next test): what an option does to the script does not depend on P, and each
# job starts P interpreters and their loader processes.
@pytest.mark.parametrize('nprocs', ranks([3], fast=[]))
def test_every_option_reaches_the_unchanged_script_and_is_reported(nprocs, tmp_path,
                                                                   dataset_root):
    proc = launch(nprocs, ['--communicator', 'rsap', '--loader', 'ours', '--flush-denormals',
                           '--double-buffering', '--check-finite', '--watchdog', '120',
                           '--shuffle-seed', '0'],
                  mnist_args(tmp_path, '--epoch', '3', '--seed', '0'), dataset_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = report(proc)
    text = '\n'.join(lines)
    assert f"create_communicator('naive') -> rsap on P = {nprocs}" in text, text
    assert '(forced by --communicator)' in text
    assert line_with(text, 'create_multi_node_optimizer(Adam) ->', 'fused Adam kernel',
                     'flush-to-zero', 'double buffering', 'finite check'), text
    # --watchdog is the process's (init's watch step, at the script's first communicator),
    # said in the process line with the flag that gave it
    assert re.search(r'chainermn_torus: process: .*watchdog 120 s; settings: .*'
                     r'watchdog=120\.0 \(--watchdog\)', proc.stdout), proc.stdout[-3000:]
    assert 'SerialIterator(batch_size=100) -> LoaderIterator (' in text, text
    # The script's unseeded scatter_dataset(shuffle=True), as ChainerMN's example calls it:
    # --shuffle-seed gives it the seed (issue 82).
    assert 'scatter_dataset(shuffle=True) without a seed -> seed 0: the run\'s, ' \
        '--shuffle-seed' in text, text
    assert len(lines) == 4, lines  # once, on rank 0
    summary = json.loads((tmp_path / 'summary.json').read_text())
    assert summary['iterator'] == 'LoaderIterator'
    assert (summary['optimizer'], summary['mode']) == ('MultiNodeOptimizer', 'double buffering')
    # 3 epochs of one-step-stale steps from seeded weights (unseeded, a CI run at P = 3
    # ended at 0.28); chance is 0.1
    assert summary['accuracy'] > 0.3, summary


# The launcher's other options, the ones a job with --double-buffering cannot take with it
# (overlap is the other way of hiding communication): together with the test above, every
# option of `python -m chainermn_torus.run` in a job (3 ranks above, 2 here). (--data-parallel and
# --global-batch are for plain Chainer scripts: test_plain_chainer_script_runs_data_parallel
# and the tests after it; --dedicated-cores needs --affinity dedicated and spare cores:
# tests/loader/test_topology_placement.py.)
@pytest.mark.slow
@pytest.mark.parametrize('nprocs', [2])
def test_the_other_options_reach_the_unchanged_script_and_are_reported(nprocs, tmp_path,
                                                                      dataset_root):
    prefix = str(tmp_path / 'timeline')
    proc = launch(nprocs, ['--communicator', 'rsaa', '--grid', f'{nprocs}x1',
                           '--threads', '1', '--segment-size', '65536', '--timeline', prefix,
                           '--no-fused', '--overlap', '--fp16-allreduce', '--loader', 'ours',
                           '--loader-processes', '1', '--affinity', 'none', '--loader-eval',
                           '--check-replicas', '2'],
                  mnist_args(tmp_path, '--epoch', '2'), dataset_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = '\n'.join(report(proc))
    assert line_with(text, "create_communicator('naive') -> rsaa",
                     f'P = {nprocs}', f'({nprocs}, 1) [grid keyword]',
                     'segment 65536 bytes', 'float16'), text
    assert line_with(text, 'create_multi_node_optimizer(Adam) ->', '(--no-fused)',
                     'overlap during backward', 'replica check every 2 steps'), text
    assert 'SerialIterator(batch_size=100) -> LoaderIterator (1 process, affinity none)' in text
    assert line_with(text, "--loader-eval: Evaluator 'main'", 'SerialIterator(batch_size=100)',
                     'LoaderIterator (1 process, affinity none)'), text
    assert '1 BLAS/OpenMP threads, 1 numba threads (requested)' in proc.stdout
    for rank in range(nprocs):  # --timeline: one file per rank
        assert os.path.getsize(f'{prefix}.rank{rank}.json') > 0
    summary = json.loads((tmp_path / 'summary.json').read_text())
    assert (summary['optimizer'], summary['mode']) == ('MultiNodeOptimizer',
                                                       'overlap during backward')
    assert summary['iterator'] == 'LoaderIterator'
    # 8 Adam steps with float16 sums, overlapped: 0.29-0.45 measured over runs (the order
    # of the overlapped sums varies); chance is 0.1
    assert summary['accuracy'] > 0.2, summary


@pytest.mark.slow
def test_environment_variables_do_what_the_options_do(tmp_path, dataset_root):
    proc = launch(2, [], mnist_args(tmp_path), dataset_root,
                  env={'CHAINERMN_TORUS_LOADER': 'serial', 'CHAINERMN_TORUS_FUSED': 'off',
                       'CHAINERMN_TORUS_FP16_ALLREDUCE': '1'})
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = '\n'.join(report(proc))
    assert "create_multi_node_optimizer(Adam) -> Adam: Chainer's update (--no-fused)" in text
    assert 'SerialIterator(batch_size=100) -> SerialIterator' in text, text
    # float16 on the wire needs one of ours; the script's naive cannot: said, not ignored.
    assert "--fp16-allreduce not applied: create_communicator('naive') made ChainerMN's" in text
    proc = launch(2, ['--communicator', 'pure_allreduce'], mnist_args(tmp_path), dataset_root,
                  env={'CHAINERMN_TORUS_FP16_ALLREDUCE': '1'})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert line_with(proc.stdout, 'pure_allreduce on P = 2', 'segment 4194304 bytes',
                     'float16'), proc.stdout[-2000:]


@pytest.mark.slow
def test_without_options_only_the_optimizer_is_ours_and_said_so(tmp_path, dataset_root):
    proc = launch(2, [], mnist_args(tmp_path), dataset_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = report(proc)
    assert lines == ['chainermn_torus.run: create_multi_node_optimizer(Adam) -> fused Adam '
                     'kernel'], lines
    summary = json.loads((tmp_path / 'summary.json').read_text())
    assert summary['iterator'] == 'SerialIterator'  # the script's own


@pytest.mark.slow
def test_loader_without_a_trainer_stops_every_rank_said_once(dataset_root):
    proc = launch(2, ['--loader', 'ours'], [os.path.join(SCRIPTS, 'custom_loop.py')],
                  dataset_root)
    assert proc.returncode != 0 and 'OK rank' not in proc.stdout
    assert proc.stderr.count('this script trains without a chainer.training updater') == 1


@pytest.mark.slow
def test_an_affinity_the_machine_cannot_give_is_refused_clearly(tmp_path, dataset_root):
    import psutil
    if (psutil.cpu_count(logical=True) or 1) > (psutil.cpu_count(logical=False) or 1):
        pytest.skip('this machine has SMT: sibling placement is possible here')
    proc = launch(2, ['--loader', 'ours', '--affinity', 'sibling'], mnist_args(tmp_path),
                  dataset_root)
    assert proc.returncode != 0 and 'OK rank' not in proc.stdout
    assert '--affinity sibling' in proc.stderr and 'hardware thread' in proc.stderr, \
        proc.stderr[-2000:]


@pytest.mark.slow
def test_loader_eval_replaces_the_evaluation_iterator_and_changes_no_result(tmp_path,
                                                                            dataset_root):
    # The loader processes hand out the batches SerialIterator would, in its order (the same
    # draws from the seeded generator): training and evaluation results are equal, bit for bit.
    runs = {}
    for name, options in (('serial', ['--loader', 'serial']),
                          ('ours', ['--loader', 'ours', '--loader-eval'])):
        out = tmp_path / name
        out.mkdir()
        proc = launch(2, ['--communicator', 'rsap', '--shuffle-seed', '5'] + options,
                      mnist_args(out, '--seed', '5'), dataset_root)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = (proc, json.loads((out / 'out' / 'log').read_text()))
    text = '\n'.join(report(runs['ours'][0]))
    assert "--loader-eval: Evaluator 'main': SerialIterator(batch_size=100) -> " \
        'LoaderIterator (' in text, text
    assert '--loader-eval' not in runs['serial'][0].stdout  # left alone unless asked
    keys = ('main/loss', 'validation/main/loss', 'validation/main/accuracy')
    assert [[e[k] for k in keys] for e in runs['ours'][1]] == \
        [[e[k] for k in keys] for e in runs['serial'][1]]
    assert len(runs['ours'][1]) == 1  # the evaluation ran through the loader processes


@pytest.mark.slow
def test_loader_eval_without_loader_is_refused(dataset_root):
    proc = launch(1, ['--loader-eval'], [MNIST], dataset_root)
    assert proc.returncode != 0
    assert line_with(proc.stderr, '--loader-eval', '--loader serial|multiprocess|ours'), \
        proc.stderr[-2000:]


PLAIN = os.path.join(SCRIPTS, 'chainer_mnist.py')


def plain_args(tmp_path, name, *extra):
    return [PLAIN, '--epoch', '1', '--limit', '1200', '--unit', '50', '--out',
            str(tmp_path / name)] + list(extra)


@pytest.mark.parametrize('nprocs', ranks([1, 2, 3], fast=[]))
def test_plain_chainer_script_runs_data_parallel(nprocs, tmp_path, dataset_root):
    # Seeded: 1200 examples are 4-12 steps, whose accuracy swings with the initial weights.
    proc = launch(nprocs, ['--data-parallel', '--communicator', 'rsap'],
                  plain_args(tmp_path, 'dp', '--seed', '1'), dataset_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = '\n'.join(report(proc))
    per_rank = -(-1200 // nprocs)  # scatter_dataset's equal shards
    assert line_with(text, '--data-parallel', '1200 examples', f'{per_rank} per rank',
                     'batch 100 per rank', f'{100 * nprocs} in all',
                     f'{nprocs} ranks'), text
    assert line_with(text, '--data-parallel', 'Evaluator', 'shard'), text
    for kind in ('DumpGraph', 'snapshot', 'LogReport', 'PrintReport'):
        assert line_with(text, '--data-parallel', kind, 'rank 0 only'), text
    assert line_with(text, 'create_multi_node_optimizer(Adam)', 'fused Adam kernel'), text
    log = json.loads((tmp_path / 'dp' / 'log').read_text())
    assert log[-1]['validation/main/accuracy'] > 0.2, log  # a few steps: above chance (0.1)
    assert (tmp_path / 'dp' / 'snapshot_iter_{}'.format(log[-1]['iteration'])).exists()
    assert proc.stdout.count('validation/main/accuracy') == 1  # one PrintReport: rank 0's


@pytest.mark.slow
@needs_root
def test_a_plain_scripts_log_and_snapshots_go_through_the_held_out_directory(
        tmp_path, dataset_root, shared_dir):
    # Issue 72: a FIFO another user put at Chainer's `log` once ended the job in Chainer's
    # SpecialFileError traceback, a link there had the log written through it. Refused at
    # start now, in one line naming the owner; the FIFO is never opened (no hang).
    log = os.path.join(shared_dir, 'log')
    as_other(os.mkfifo, log)
    proc = launch(2, ['--data-parallel', '--communicator', 'rsap'],
                  [PLAIN, '--epoch', '1', '--limit', '1200', '--unit', '50', '--out',
                   shared_dir], dataset_root)
    assert proc.returncode != 0 and 'SpecialFileError' not in proc.stderr
    assert line_with(proc.stderr, f'refusing to write {log}',
                     'a FIFO owned by nobody (uid 65534) is already there'), proc.stderr[-2000:]
    assert 'validation/main/accuracy' not in proc.stdout  # before training
    # Without it: the log and the snapshot made new and renamed over their names, nothing
    # else left beside them.
    os.unlink(log)
    proc = launch(2, ['--data-parallel', '--communicator', 'rsap'],
                  [PLAIN, '--epoch', '1', '--limit', '1200', '--unit', '50', '--out',
                   shared_dir], dataset_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = sorted(os.listdir(shared_dir))
    assert 'log' in names and any(n.startswith('snapshot_iter_') for n in names), names
    assert not [n for n in names if n.endswith('.tmp') or n.startswith('tmp')], names


@pytest.mark.slow
@pytest.mark.parametrize('nprocs', [2])
def test_data_parallel_equals_chainermn_code_doing_the_same_bit_for_bit(nprocs, tmp_path,
                                                                         dataset_root):
    # Same seed, same shards (scatter_dataset, seed 0: --data-parallel's, and the ChainerMN
    # script's unseeded one given it by --shuffle-seed), no shuffling inside the shards: the
    # same updates in the same order, so the same final parameters, bit for bit.
    common = ['--seed', '3', '--no-shuffle']
    a = launch(nprocs, ['--data-parallel', '--communicator', 'rsap'],
               plain_args(tmp_path, 'plain', *common), dataset_root)
    assert a.returncode == 0, a.stderr[-3000:]
    b = launch(nprocs, ['--communicator', 'rsap', '--shuffle-seed', '0'],
               mnist_args(tmp_path, *common), dataset_root)
    assert b.returncode == 0, b.stderr[-3000:]
    import numpy
    with numpy.load(str(tmp_path / 'plain' / 'model_final.npz')) as x, \
            numpy.load(str(tmp_path / 'out' / 'model_final.npz')) as y:
        assert sorted(x.files) == sorted(y.files)
        for k in x.files:
            assert x[k].tobytes() == y[k].tobytes(), k


@pytest.mark.slow
def test_data_parallel_snapshot_autoload_resumes_every_rank(tmp_path, dataset_root):
    # Chainer's examples take snapshot(autoload=True); on rank 0 alone it would resume one
    # rank and leave the others at iteration 0 (a deadlock at the end of training).
    for epochs in ('1', '2'):
        proc = launch(2, ['--data-parallel', '--communicator', 'rsap'],
                      plain_args(tmp_path, 'auto', '--epoch', epochs, '--autoload'),
                      dataset_root)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert line_with(proc.stdout, '--data-parallel', 'every rank', 'snapshot_iter_6',
                     'autoload'), proc.stdout[-2000:]
    log = json.loads((tmp_path / 'auto' / 'log').read_text())
    assert [e['epoch'] for e in log] == [1, 2] and log[-1]['iteration'] == 12, log
    assert (tmp_path / 'auto' / 'snapshot_iter_12').exists()


@pytest.mark.slow
def test_data_parallel_refuses_what_it_cannot_parallelise(tmp_path, dataset_root):
    loop = launch(2, ['--data-parallel'], [os.path.join(SCRIPTS, 'plain_loop.py')],
                  dataset_root)
    assert loop.returncode != 0 and 'OK' not in loop.stdout
    said = [line for line in loop.stderr.splitlines() if line_with(line, 'custom training loop',
                                                              'Trainer', 'StandardUpdater')]
    assert len(said) == 1, loop.stderr[-2000:]  # once, not once per rank
    gpus = launch(2, ['--data-parallel'], [os.path.join(SCRIPTS, 'parallel_updater.py')],
                  dataset_root)
    assert gpus.returncode != 0 and 'OK' not in gpus.stdout
    said = [line for line in gpus.stderr.splitlines() if line_with(line, 'ParallelUpdater', 'GPU')]
    assert len(said) == 1, gpus.stderr[-2000:]
    odd = launch(3, ['--data-parallel', '--global-batch'], plain_args(tmp_path, 'odd'),
                 dataset_root)
    assert odd.returncode != 0
    assert line_with(odd.stderr, '--global-batch', 'batch size 100', '3 ranks'), odd.stderr
    even = launch(2, ['--data-parallel', '--global-batch'], plain_args(tmp_path, 'even'),
                  dataset_root)
    assert even.returncode == 0, even.stderr[-2000:]
    assert line_with(even.stdout, '50 per rank', '100 in all', '2 ranks'), even.stdout


@pytest.mark.slow
@pytest.mark.parametrize('loader', ['ours'])
def test_chainermn_style_imagenet_script_gets_our_loader(loader, imagenet_lists, tmp_path,
                                                         dataset_root):
    d = imagenet_lists
    proc = launch(2, ['--communicator', 'rsap', '--loader', loader],
                  [os.path.join(SCRIPTS, 'chainermn_imagenet.py'), os.path.join(d, 'train.txt'),
                   os.path.join(d, 'val.txt'), '--root', d, '--mean',
                   os.path.join(d, 'mean.npy'), '--out', str(tmp_path / 'out'), '--summary',
                   str(tmp_path / 'summary.json')], dataset_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = '\n'.join(report(proc))
    assert 'MultiprocessIterator(n_processes=2, batch_size=16) -> {}'.format(
        'LoaderIterator (' if loader == 'ours' else 'SerialIterator') in text, text
    assert "create_multi_node_optimizer(MomentumSGD) -> fused MomentumSGD kernel" in text
    summary = json.loads((tmp_path / 'summary.json').read_text())
    assert summary['iterator'] == ('LoaderIterator' if loader == 'ours' else 'SerialIterator')
    # The validation iterator is left alone: the script's own MultiprocessIterator.
    assert text.count(' -> ') == 3, text


@pytest.mark.slow
def test_plain_chainer_imagenet_script_runs_data_parallel_with_our_loader(imagenet_lists,
                                                                          tmp_path,
                                                                          dataset_root):
    d = imagenet_lists
    proc = launch(2, ['--data-parallel', '--communicator', 'rsap', '--loader', 'ours',
                      '--loader-eval'],
                  [os.path.join(SCRIPTS, 'chainer_imagenet.py'), os.path.join(d, 'train.txt'),
                   os.path.join(d, 'val.txt'), '--root', d, '--mean',
                   os.path.join(d, 'mean.npy'), '--out', str(tmp_path / 'out')], dataset_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = '\n'.join(report(proc))
    assert '--data-parallel: 60 examples -> 30 per rank' in text, text
    assert 'MultiprocessIterator(n_processes=2, batch_size=16) -> LoaderIterator (' in text
    assert 'create_multi_node_optimizer(MomentumSGD) -> fused MomentumSGD kernel' in text
    for kind in ('snapshot', 'LogReport', 'PrintReport', 'ProgressBar', 'DumpGraph'):
        assert f'--data-parallel: {kind} runs on rank 0 only' in text, text
    assert '--data-parallel: Evaluator -> each rank evaluates its shard' in text
    # the shard of the validation set (20 -> 10 per rank), then the loader processes
    assert "--loader-eval: Evaluator 'main': MultiprocessIterator(n_processes=2, " \
        'batch_size=16) -> LoaderIterator (' in text, text
    log = json.loads((tmp_path / 'out' / 'log').read_text())
    assert log[-1]['iteration'] == 2 and 'validation/main/accuracy' in log[-1], log
    assert (tmp_path / 'out' / 'model_iter_2').exists()
