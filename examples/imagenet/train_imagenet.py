#!/usr/bin/env python
"""Data-parallel ImageNet-format training with ChainerMN on CPU, in the shape of ChainerMN's
ImageNet example, with a per-iteration time breakdown and a choice of data loader.

    python scripts/make_imagenet_subset.py --out data/imagenet-fmnist
    mpiexec -n 4 python examples/imagenet/train_imagenet.py \\
        data/imagenet-fmnist/train.txt data/imagenet-fmnist/val.txt --arch tiny --epoch 2

Lists are "relative/path label" per line (paths relative to --root, by default the train
list's directory); the mean image is --mean (default ROOT/mean.npy, see compute_mean.py).
Images must all have the mean's size (resized beforehand, as in ChainerMN's example).

Loaders (--loader): ``serial`` reads in the training process (Chainer's SerialIterator);
``multiprocess`` uses Chainer's MultiprocessIterator with --loader-processes workers (runs
with the same seed are bit-identical with ``ours`` and ``serial`` only: Chainer's workers
never learn the epoch that keys the random crops);
``ours`` uses chainermn_torus.loader, whose worker processes are placed on cores next to
the training process by --affinity. ChainerMN's FAQ: forking an MPI process is unsafe, so
MultiprocessIterator's workers come from a forkserver started before MPI is initialised,
and ours starts its workers with ``spawn`` (a fresh interpreter).

Written to --out: ``breakdown.json`` (per-iteration medians in ms of data wait, forward +
backward, all-reduce and update, per rank; the first iteration, which broadcasts the
initial weights instead of averaging gradients, is left out) and ``summary.json`` (test
accuracy, iterations/s, the loader). The last line printed is ``iterations/s: ...``.
"""
import json
import multiprocessing
import os
import statistics
import time

# chainermn_torus first: Chainer's import after it skips its environment check's package
# scans where they have nothing to find (half of a rank's start-up;
# runtime.chainer_glue.chainer_import).
import chainermn_torus  # NOQA

import chainer
import chainer.links as L
from chainer import training
from chainer.training import extensions
import numpy

from chainermn_torus import command_line, settings_table
from chainermn_torus.datasets import draws
from chainermn_torus.datasets.shards import KeyedOrder, batch_too_large, virtual_shards
from chainermn_torus.extensions import checkpoint, outputs
from chainermn_torus.extensions.timing import time_calls
from chainermn_torus.extensions.virtual_evaluation import evaluate_over_virtual_ranks
from chainermn_torus.models import ResNet50, TinyNet
from chainermn_torus.optimizers.large_batch import linear_scaling
from chainermn_torus.optimizers.virtual_updater import VirtualRanksUpdater
from chainermn_torus.runtime import report, world

# Importing chainermn_torus starts no MPI; the first communicator does, in main(), after
# MultiprocessIterator's forkserver has been started (see start_forkserver_without_mpi).
# Loader worker processes also import this file (as __mp_main__), so nothing at module level
# may touch MPI.

DEFAULT_CROP = {'resnet50': 224, 'tiny': 64}
DEFAULT_LOADERS = 2  # loader processes per rank where the placement does not limit them
PHASES = ('data', 'forward_backward', 'allreduce', 'update', 'iteration')


ARCHS = {'resnet50': ResNet50, 'tiny': TinyNet}


def build_model(arch, n_classes):
    return L.Classifier(ARCHS[arch](n_classes))


def _noop():
    pass


def start_forkserver_without_mpi():
    """Make 'forkserver' the start method and start the server now, before MPI_Init.

    Loader workers are then forked from a process that never initialised MPI (ChainerMN's
    FAQ: fork after MPI_Init is unsafe). The server is started with the launcher's PMI
    variables removed and with mpi4py's automatic MPI_Init off, because workers import
    chainermn_torus to unpickle the dataset: should anything there import mpi4py.MPI
    with MPICH's PMI_FD inherited, that MPI_Init writes into whatever file descriptor has
    the same number in the worker (measured, when importing chainermn_torus still
    initialised MPI: it corrupted the resource tracker's pipe) and the job hangs. The
    environment of this process is restored afterwards.
    """
    multiprocessing.set_start_method('forkserver', force=True)
    # Preloaded once in the server, so workers start without importing chainer again.
    multiprocessing.set_forkserver_preload(['__main__', 'chainermn_torus.datasets.imagenet'])
    saved = dict(os.environ)
    try:
        for name in list(os.environ):
            if name.startswith(('PMI_', 'PMIX_')):
                del os.environ[name]
        os.environ['MPI4PY_RC_INITIALIZE'] = '0'
        p = multiprocessing.Process(target=_noop)  # the first process starts the server
        p.start()
        p.join()
    finally:
        os.environ.clear()
        os.environ.update(saved)


class LoaderFailure:
    """Stands in a batch for an example whose reading raised in a loader worker."""

    def __init__(self, index, error):
        self.message = f'example {index}: {type(error).__name__}: {error}'


class CarryErrors(chainer.dataset.DatasetMixin):
    """Returns a dataset's exceptions as LoaderFailure objects instead of raising them.

    Chainer's MultiprocessIterator loses an exception raised in a worker: its prefetch
    thread dies with it and next() waits for ever (measured with a corrupt JPEG: the job
    hangs). Carried to the training process, ``convert`` raises it there.
    """

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def get_example(self, i):
        try:
            return self.dataset[i]
        except Exception as e:
            return LoaderFailure(i, e)


@chainer.dataset.converter()
def convert(batch, device):
    """concat_examples, after raising any error a loader worker carried (CarryErrors)."""
    for example in batch:
        if isinstance(example, LoaderFailure):
            raise ValueError('reading the data failed in a loader process: ' + example.message)
    return chainer.dataset.concat_examples(batch, device)


class StepTimer:
    """Per-iteration seconds of: data (iterator.next() + converter), allreduce (the
    communicator's multi_node_mean_grad, or mean_grad_sets with virtual ranks), update (the
    wrapped optimizer's own update) and forward_backward (the rest of the multi-node
    optimizer's update: loss, backward and the wrapper's bookkeeping)."""

    def __init__(self, comm, optimizer):
        self.rows = []
        self._spent = {'allreduce': 0.0, 'update': 0.0}
        time_calls(comm, 'multi_node_mean_grad', self._spent, 'allreduce')
        if getattr(comm, 'virtual_ranks', None) is not None:   # the held ranks' sets at once
            time_calls(comm, 'mean_grad_sets', self._spent, 'allreduce')
        # Instance attributes shadow the methods; set after setup(), which the fused
        # update may have changed.
        time_calls(optimizer.actual_optimizer, 'update', self._spent, 'update')

    def start_step(self):
        for phase in self._spent:
            self._spent[phase] = 0.0

    def end_step(self, data, step):
        allreduce, update = self._spent['allreduce'], self._spent['update']
        self.rows.append({'data': data, 'allreduce': allreduce, 'update': update,
                          'forward_backward': max(step - allreduce - update, 0.0),
                          'iteration': data + step})

    def measured(self):
        # The first iteration broadcasts the initial weights instead of averaging, and
        # starts the loader's workers; the second makes the communicator's buffers (the
        # shared-memory window) and compiles its kernels on first use: not typical steps.
        skip = 2 if len(self.rows) > 2 else len(self.rows) - 1
        return self.rows[max(skip, 0):]

    def medians_ms(self):
        rows = self.measured()
        return {phase: 1e3 * statistics.median(r[phase] for r in rows) if rows else None
                for phase in PHASES}

    def iterations_per_second(self):
        rows = self.measured()
        total = sum(r['iteration'] for r in rows)
        return len(rows) / total if total > 0 else None


class TimedUpdater(training.updaters.StandardUpdater):
    """StandardUpdater.update_core with the data and step times recorded in a StepTimer."""

    def __init__(self, iterator, optimizer, timer):
        super().__init__(iterator, optimizer, converter=convert, device=-1)
        self.timer = timer

    def update_core(self):
        iterator = self._iterators['main']
        optimizer = self._optimizers['main']
        t0 = time.perf_counter()
        # Crops are keyed by (seed, epoch, image), not by the process drawing them: runs
        # with the same seed are bit-identical at any rank count and after a resume.
        draws.set_epoch(iterator.epoch)
        batch = iterator.next()
        in_arrays = self.converter(batch, self.input_device)
        t1 = time.perf_counter()
        self.timer.start_step()
        optimizer.update(self.loss_func or optimizer.target, *in_arrays)
        self.timer.end_step(t1 - t0, time.perf_counter() - t1)
        if self.auto_new_epoch and iterator.is_new_epoch:
            optimizer.new_epoch(auto=True)


class TimedVirtualUpdater(VirtualRanksUpdater):
    """VirtualRanksUpdater's step (each held virtual rank's forward and backward in turn),
    with each batch's crops keyed by its own iterator's epoch and the times recorded."""

    def __init__(self, iterators, optimizer, timer):
        super().__init__(iterators, optimizer, converter=convert, device=-1)
        self.timer, self._data = timer, 0.0

    def next_batch(self, iterator):
        t0 = time.perf_counter()
        draws.set_epoch(iterator.epoch)
        batch = iterator.next()
        self._data += time.perf_counter() - t0
        return batch

    def update_core(self):
        self._data = 0.0
        self.timer.start_step()
        t0 = time.perf_counter()
        super().update_core()
        self.timer.end_step(self._data, time.perf_counter() - t0 - self._data)


COUNT = command_line.arg_type('count')  # an integer >= 1, or a clear argparse error


def parse_args(argv=None):
    parser = world.ArgumentParser(description='ChainerMN example: ImageNet on CPU')
    parser.add_argument('train', help='training list: "relative/path label" per line')
    parser.add_argument('val', help='validation list, same format')
    parser.add_argument('--root', '-R', default=None,
                        help="directory the lists' paths are relative to (default: the "
                             "training list's directory)")
    parser.add_argument('--mean', '-m', default=None,
                        help='mean image (compute_mean.py; default: ROOT/mean.npy); '
                             '"none": no mean subtraction')
    parser.add_argument('--arch', '-a', choices=sorted(ARCHS), default='resnet50')
    parser.add_argument('--batchsize', '-B', type=COUNT, default=32,
                        help='training mini-batch size per rank (default: %(default)s)')
    parser.add_argument('--val-batchsize', '-b', type=COUNT, default=None,
                        help='validation mini-batch size per rank (default: --batchsize)')
    parser.add_argument('--epoch', '-E', type=COUNT, default=10,
                        help='number of epochs to train (default: %(default)s)')
    parser.add_argument('--crop-size', type=COUNT, default=None,
                        help='side of the square crops (default: {})'.format(', '.join(
                            f'{v} for {k}' for k, v in sorted(DEFAULT_CROP.items()))))
    parser.add_argument('--lr', type=command_line.arg_type('positive'), default=None,
                        help='MomentumSGD learning rate (default: 0.1 x total batch / 256, '
                             'Goyal et al.)')
    command_line.add_arguments(parser, communicator='rsap', grid=False, threads=False,
                               exact_sum=True)
    # The loader's settings, from their rows (flag, else variable, else default); this
    # example's own default loader: ours.
    command_line.add_option(parser, 'loader', default='ours', help='data loader')
    command_line.add_option(parser, 'loader_processes', aliases=('-j',),
                      help='loader worker processes per rank (multiprocess, ours; default: '
                           f'{DEFAULT_LOADERS}, or for ours as many as the affinity plan gives '
                           'CPUs, up to '
                           f'{DEFAULT_LOADERS})')
    command_line.add_option(parser, 'affinity', help='where --loader ours places its workers')
    parser.add_argument('--skip-corrupt', action='store_true',
                        help='skip images that cannot be decoded (with a warning) instead of '
                             'stopping')
    parser.add_argument('--out', '-o', default='results/imagenet', help='output directory')
    # Importing chainermn_torus starts no MPI, so this may run before the multiprocess
    # loader's forkserver (see main).
    checkpoint.add_arguments(parser)
    parser.add_argument('--seed', type=command_line.arg_type('seed'), default=0, help='random seed')
    parser.add_argument('--n-classes', type=COUNT, default=None, metavar='K',
                        help='classes of the model (default: from the training list, whose '
                             'labels must then be 0..K-1 with every class present)')
    command_line.add_option(parser, 'virtual_ranks', metavar='V',
                            help='train as V ranks on any number of processes <= V (each its '
                                 'shard, batch, order and running statistics; the exact sum): '
                                 'the same model on any number of processes')
    parser.add_argument('--limit', type=COUNT, default=None, metavar='N',
                        help='use N images of each list, drawn with --seed (smoke tests)')
    # The settings the command line gave ride along for chainermn_torus.init.
    args, args.command_line_settings = command_line.parse_command_line(parser, argv)
    checkpoint.check_arguments(parser, args)
    if args.crop_size is None:
        args.crop_size = DEFAULT_CROP[args.arch]
    if args.val_batchsize is None:
        args.val_batchsize = args.batchsize
    if args.root is None:
        args.root = os.path.dirname(os.path.abspath(args.train))
    if args.mean is None:
        args.mean = os.path.join(args.root, 'mean.npy')
    return args


def check_labels(args, pairs):
    """The class count: --n-classes, or the training list's labels 0..K-1, all present (a
    typo such as 75 for 5 would otherwise build a model with 76 classes). Memory in the
    number of images, whatever the labels say (a label of 10**9 was once OOM-killed here)."""
    largest = max(pairs, key=lambda pair: pair[1])
    bound = settings_table.BOUNDS['classes']
    if args.n_classes is not None:
        if args.n_classes > bound:
            raise ValueError(f'--n-classes {args.n_classes} is more than the {bound:,} classes a '
                             'model may '
                             'have')
        if largest[1] >= args.n_classes:
            raise ValueError(f'{args.train}: label {largest[1]} ({largest[0]}) is not below '
                             f'--n-classes {args.n_classes}')
        return args.n_classes
    present = {label for _, label in pairs}
    if len(present) <= largest[1]:
        missing, c = [], 0
        while len(missing) < 5 and c <= largest[1]:  # at most len(present) + 5 steps
            if c not in present:
                missing.append(c)
            c += 1
        raise ValueError(
            '{}: labels go up to {} ({}) but {:,} of the classes below have no image (e.g. {}); '
            'fix the label if it is a typo, or pass --n-classes K for a list that leaves '
            'classes out'.format(args.train, largest[1], largest[0],
                                 largest[1] + 1 - len(present), ', '.join(map(str, missing))))
    return largest[1] + 1


def load_mean(path):
    """The mean image written by compute_mean.py: a .npy array of shape (3, H, W)."""
    try:
        mean = numpy.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise ValueError(f'{path}: not a mean image written by compute_mean.py (a .npy array); '
                         f'numpy says: {e}') from None
    if not isinstance(mean, numpy.ndarray) or mean.ndim != 3 or mean.shape[0] != 3:
        raise ValueError('{}: a mean image has shape (3, H, W), this holds {}'.format(
            path, getattr(mean, 'shape', type(mean).__name__)))
    return mean


def load_data(args):
    """Rank 0's part: the lists, the mean and the datasets. Raises OSError/ValueError."""
    from chainermn_torus.datasets.imagenet import PreprocessedDataset, read_list

    train_pairs = read_list(args.train, args.root)
    val_pairs = read_list(args.val, args.root)
    n_classes = check_labels(args, train_pairs)  # before --limit: the same model
    bad = [(path, label) for path, label in val_pairs if label >= n_classes]
    if bad:
        raise ValueError('{}: {} validation image(s) have labels the training list {} does '
                         'not have (it has 0..{}), e.g. {} {}'.format(
                             args.val, len(bad), args.train, n_classes - 1, *bad[0]))
    if args.limit:
        rng = numpy.random.RandomState(args.seed)
        train_pairs, val_pairs = [
            [pairs[i] for i in sorted(rng.permutation(len(pairs))[:args.limit])]
            for pairs in (train_pairs, val_pairs)]
    mean = None
    if args.mean.lower() != 'none':
        if not os.path.exists(args.mean):
            raise ValueError(f'mean image {args.mean} does not exist: compute it with `python '
                             f'examples/imagenet/compute_mean.py {args.train} --root {args.root} '
                             f'--output {args.mean}` or '
                             'pass --mean none')
        mean = load_mean(args.mean)
    bound = getattr(args, 'max_image_pixels', None)  # the settings', handed down by main
    train = PreprocessedDataset(train_pairs, args.root, mean, args.crop_size, random=True,
                                seed=args.seed, skip_corrupt=args.skip_corrupt,
                                max_pixels=bound)
    val = PreprocessedDataset(val_pairs, args.root, mean, args.crop_size, random=False,
                              skip_corrupt=args.skip_corrupt, max_pixels=bound)
    return train, val, n_classes


def make_iterators(args, train, val, comm, plan, virtual=None):
    """(training, validation) iterators; ``virtual``: the virtual rank they are for, whose
    orders are keyed by it (the same on any number of processes)."""
    bs, vbs, n = args.batchsize, args.val_batchsize, args.loader_processes
    own = None if virtual is None else KeyedOrder(args.seed, virtual)
    if args.loader == 'serial':
        return (chainer.iterators.SerialIterator(train, bs, order_sampler=own),
                chainer.iterators.SerialIterator(val, vbs, repeat=False, shuffle=False))
    if args.loader == 'multiprocess':
        # Bytes of one example's arrays: the float32 CHW crop (the label is a numpy scalar,
        # which goes by pickling). With it given, Chainer does not load a first batch in
        # this process to measure the size.
        shared_mem = 4 * 3 * args.crop_size * args.crop_size
        return (chainer.iterators.MultiprocessIterator(CarryErrors(train), bs, n_processes=n,
                                                       shared_mem=shared_mem,
                                                       order_sampler=own),
                chainer.iterators.MultiprocessIterator(CarryErrors(val), vbs, repeat=False,
                                                       shuffle=False, n_processes=n,
                                                       shared_mem=shared_mem))
    from chainermn_torus.loader import LoaderIterator
    rank = comm.rank if virtual is None else virtual
    train_iter = LoaderIterator(train, bs, repeat=True, shuffle=None if own else True,
                                order_sampler=own, n_processes=n, n_prefetch=4,
                                cpus=plan.loader_cpus, seed=args.seed + rank)
    # The Evaluator resets its iterator before each evaluation: ours can be reset.
    val_iter = LoaderIterator(val, vbs, repeat=False, shuffle=False, n_processes=n,
                              n_prefetch=4, cpus=plan.loader_cpus, seed=args.seed)
    return train_iter, val_iter


def main():
    args = parse_args()
    if args.loader == 'multiprocess':
        start_forkserver_without_mpi()  # before the communicator, i.e. before MPI_Init
    if args.loader != 'ours' and args.loader_processes is None:
        args.loader_processes = DEFAULT_LOADERS

    import chainermn

    # The process configured as this package configures it, for ChainerMN's communicators
    # too (the threads before the loader's placement sizes them again).
    settings = chainermn_torus.init(flags=args.command_line_settings).settings
    args.max_image_pixels = settings['max_image_pixels']  # what load_data's datasets take
    comm = chainermn.create_communicator(args.communicator)
    # Now, on every rank, not after training: the output directory walked and held, and its
    # names holding nothing of another user's (extensions.outputs).
    out = checkpoint.check_output(comm, args.out, ('summary.json', 'breakdown.json', 'log',
                                                   'model_final.npz'), args.trust_out_dir)
    # --virtual-ranks V: the job computes as V ranks (ChainerMN's communicators have none)
    virtual = getattr(comm, 'virtual_ranks', None)
    ranks = comm.size if virtual is None else virtual

    plan = None
    if args.loader == 'ours':
        from chainermn_torus.loader import apply_placement, describe_plan, plan_placement
        try:
            plan = plan_placement(policy=args.affinity, intra_rank=comm.intra_rank,
                                  intra_size=comm.intra_size,
                                  loader_processes=args.loader_processes or 1)
            error = None
        except ValueError as e:
            error = str(e)
        errors = comm.mpi_comm.allgather(error)  # every rank stops, not only the one that failed
        if any(errors):
            failed = [r for r, e in enumerate(errors) if e]
            # the same on every rank
            report.stop(f'--affinity {args.affinity}: rank {failed[0]}: {errors[failed[0]]}',
                        comm.rank)
        if args.loader_processes is None:  # what the plan has room for (2 cores: 1)
            args.loader_processes = DEFAULT_LOADERS if plan.loader_cpus is None else \
                max(1, min(DEFAULT_LOADERS, len(plan.loader_cpus)))
        if comm.intra_rank == 0:
            print(describe_plan(plan), flush=True)
        apply_placement(plan, comm=comm)  # pins this process and sizes its BLAS threads

    # Rank 0 reads the lists (a bad line fails there) and every rank learns of it.
    error, train, val, n_classes = None, None, None, None
    if comm.rank == 0:
        try:
            train, val, n_classes = load_data(args)
            error = batch_too_large(len(train), args.batchsize, ranks, 'training images',
                                    limit=args.limit)
        except (OSError, ValueError) as e:
            error = str(e)
    error, n_classes = comm.mpi_comm.bcast((error, n_classes), root=0)
    if error is not None:
        report.stop(error, comm.rank)  # the same on every rank: rank 0 says it
    if virtual is None:
        trains = [chainermn.scatter_dataset(train, comm, shuffle=True, seed=args.seed)]
        vals = [chainermn.scatter_dataset(val, comm)]
    else:   # the shards ChainerMN gives each of V ranks, those this process holds
        train, val = comm.mpi_comm.bcast((train, val), root=0)
        trains = virtual_shards(train, ranks, comm.held, shuffle=True, seed=args.seed)
        vals = virtual_shards(val, ranks, comm.held, shuffle=False)

    lr = args.lr if args.lr is not None else 0.1 * args.batchsize * ranks / 256
    if comm.rank == 0:
        print('==========================================')
        print(f'Num process (COMM_WORLD): {comm.size}' + (
            '' if virtual is None else f', {ranks} virtual ranks'))
        print('Using {} communicator{}'.format(
            args.communicator, ': ' + comm.describe() if hasattr(comm, 'describe') else ''))
        print(f'Using {args.arch} arch, {n_classes} classes, {args.crop_size}x{args.crop_size} '
              'crops')
        print(f'Num Minibatch-size: {args.batchsize} per rank, learning rate {lr:g}')
        print(f'Num epoch: {args.epoch}')
        print('Loader: {}{}'.format(args.loader, '' if args.loader == 'serial' else
                                    ', {} process(es) per rank{}'.format(
                                        args.loader_processes,
                                        ', affinity ' + args.affinity
                                        if args.loader == 'ours' else '')))
        if args.loader == 'multiprocess':
            # Chainer's workers crop with the dataset they were given at start: the epoch
            # the crops are keyed by never reaches them (ours and serial send it).
            print('Loader note: with multiprocess, runs with the same seed are not '
                  'bit-identical (its worker processes do not learn the epoch that keys the '
                  'random crops); use --loader ours or serial for reproducible runs')
        print('==========================================', flush=True)

    numpy.random.seed(args.seed)  # same initial weights everywhere; bcast_data makes sure
    model = build_model(args.arch, n_classes)
    optimizer = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(lr=lr, momentum=0.9), comm)
    optimizer.setup(model)
    optimizer.add_hook(chainer.optimizer_hooks.WeightDecay(1e-4))
    timer = StepTimer(comm, optimizer)

    held = [None] if virtual is None else list(comm.held)
    made = [make_iterators(args, t, v, comm, plan, virtual=h)
            for t, v, h in zip(trains, vals, held)]
    train_iters, val_iters = [m[0] for m in made], [m[1] for m in made]
    try:
        evaluator = extensions.Evaluator(val_iters[0], model, converter=convert, device=-1)
        if virtual is None:
            updater = TimedUpdater(train_iters[0], optimizer, timer)
            evaluator = chainermn.create_multi_node_evaluator(evaluator, comm)
        else:   # each held virtual rank in turn; the evaluation's means in their order
            updater = TimedVirtualUpdater(train_iters, optimizer, timer)
            evaluator = evaluate_over_virtual_ranks(evaluator, comm, val_iters,
                                                    lambda: updater.held_states)
        trainer = training.Trainer(updater, (args.epoch, 'epoch'), out=args.out)
        trainer.extend(evaluator, trigger=(1, 'epoch'))
        if comm.rank == 0:
            trainer.extend(outputs.hold_reports(extensions.LogReport(trigger=(1, 'epoch')),
                                                out))
            trainer.extend(extensions.PrintReport(
                ['epoch', 'iteration', 'main/loss', 'validation/main/loss', 'main/accuracy',
                 'validation/main/accuracy', 'elapsed_time']))
        # --checkpoint-dir, --resume, ...; --resume-batch scale on another rank count
        # scales the learning rate by Goyal et al.'s linear rule.
        checkpoint.attach(comm, trainer, args, lr_rule=linear_scaling, settings=settings)
        t0 = time.perf_counter()
        trainer.run()
        if getattr(optimizer, 'watchdog', None) is not None:
            optimizer.watchdog.training_over()  # the final evaluation is watched as such
        train_seconds = time.perf_counter() - t0
        # Training stops at an epoch's end, where the evaluator has just run (on all ranks).
        final = {k: v for k, v in trainer.observation.items() if k.startswith('validation/')}
        if 'validation/main/accuracy' not in final:
            final = evaluator()
        if comm.rank == 0:   # rank 0's model: virtual rank 0's with virtual ranks
            outputs.write(out, 'model_final.npz',
                          lambda f: chainer.serializers.save_npz(f, model, compression=False),
                          mode='wb')
    finally:
        for it in train_iters + val_iters:
            if hasattr(it, 'finalize'):
                it.finalize()  # stops loader workers, also when training failed

    per_rank = comm.gather_obj({'median_ms': timer.medians_ms(),
                                'iterations_per_second': timer.iterations_per_second(),
                                'iterations_measured': len(timer.measured())})
    if comm.rank == 0:
        # Ranks wait for each other in every all-reduce: the job runs at the slowest's rate.
        rates = [r['iterations_per_second'] for r in per_rank
                 if r['iterations_per_second'] is not None]
        rate = min(rates) if rates else None
        breakdown = {
            'loader': args.loader, 'ranks': comm.size, 'unit': 'ms',
            'phases': {'data': 'iterator.next() + converter',
                       'forward_backward': 'rest of the multi-node optimizer update',
                       'allreduce': 'communicator.multi_node_mean_grad',
                       'update': "the wrapped optimizer's update",
                       'iteration': 'data + the whole optimizer update'},
            'iterations_measured': per_rank[0]['iterations_measured'],
            'median_ms': per_rank[0]['median_ms'],
            'per_rank_median_ms': [r['median_ms'] for r in per_rank],
        }
        summary = {
            'arch': args.arch, 'loader': args.loader,
            'loader_processes': None if args.loader == 'serial' else args.loader_processes,
            'affinity': args.affinity if args.loader == 'ours' else None,
            'communicator': args.communicator, 'ranks': comm.size,
            'virtual_ranks': virtual, 'epochs': args.epoch,
            'batchsize_per_rank': args.batchsize, 'crop_size': args.crop_size, 'lr': lr,
            'n_classes': n_classes, 'iterations': updater.iteration,
            'iterations_per_second': rate,
            'images_per_second': rate * args.batchsize * ranks if rate else None,
            'per_rank_iterations_per_second': [r['iterations_per_second'] for r in per_rank],
            'train_seconds': train_seconds,
            'test_accuracy': float(final['validation/main/accuracy']),
            'test_loss': float(final['validation/main/loss']),
        }
        for name, content in (('breakdown.json', breakdown), ('summary.json', summary)):
            outputs.write(out, name, lambda f: json.dump(content, f, indent=2), mode='w')
        med = breakdown['median_ms']
        print('median per iteration (rank 0): ' + ', '.join(
            f'{p} {med[p]:.1f} ms' for p in PHASES if med[p] is not None))
        print('test accuracy: {:.4f}   training time: {:.2f} s'.format(
            summary['test_accuracy'], train_seconds))
        print('iterations/s: {}'.format(f'{rate:.2f}' if rate else 'n/a'), flush=True)


if __name__ == '__main__':
    main()
