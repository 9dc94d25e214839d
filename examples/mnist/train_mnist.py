#!/usr/bin/env python
"""Data-parallel MNIST (MLP 784-1000-1000-10) with ChainerMN, in the shape of ChainerMN's
example, reading MNIST-format IDX files (default: Debian's Fashion-MNIST) on CPU.

    mpiexec -n 4 python examples/mnist/train_mnist.py --communicator rsap --epoch 2

CPU options of chainermn_torus's multi-node optimizer: the fused update (on by default for
Adam, MomentumSGD and RMSprop), flush-to-zero (on), double buffering (off: it changes the
training into 1-step-stale updates), float16 gradient communication (off), a NaN/Inf check,
the per-rank thread budget, and Goyal et al.'s learning-rate warm-up. ``--stock`` runs
ChainerMN's own wrapper and Chainer's update instead, for comparison.
"""
import json
import time

# chainermn_torus first: it registers pure_allreduce, rsaa and rsap with ChainerMN, and
# Chainer's import after it skips its environment check's package scans where they have
# nothing to find (half of a rank's start-up; runtime.chainer_glue.chainer_import).
import chainermn_torus  # registers the names; init (below) configures the process

import chainer
import chainer.links as L
from chainer import training
from chainer.training import extensions
import chainermn
import chainermn.optimizers
import numpy

from chainermn_torus import command_line
from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR, load_mnist_idx
from chainermn_torus.datasets.shards import KeyedOrder, batch_too_large, virtual_shards
from chainermn_torus.extensions import checkpoint, outputs
from chainermn_torus.extensions.timing import time_gradient_communication
from chainermn_torus.extensions.virtual_evaluation import evaluate_over_virtual_ranks
from chainermn_torus.models import MLP  # ChainerMN's example's MLP, 784-unit-unit-10
from chainermn_torus.optimizers.large_batch import GradualWarmup, linear_scaling
from chainermn_torus.optimizers.virtual_updater import VirtualRanksUpdater
from chainermn_torus.runtime import report, world

OPTIMIZERS = {
    'adam': (lambda lr: chainer.optimizers.Adam(alpha=lr), 'alpha', 0.001),
    'momentum': (lambda lr: chainer.optimizers.MomentumSGD(lr=lr), 'lr', 0.01),
    'rmsprop': (lambda lr: chainer.optimizers.RMSprop(lr=lr), 'lr', 0.001),
}


COUNT = command_line.arg_type('count')  # an integer >= 1, or a clear argparse error


def main():
    parser = world.ArgumentParser(description='ChainerMN example: MNIST on CPU')
    parser.add_argument('--batchsize', '-b', type=COUNT, default=100,
                        help='Number of images in each mini-batch (per rank)')
    # --communicator, --grid, --threads, --exact-sum
    command_line.add_arguments(parser, communicator='rsap', exact_sum=True)
    parser.add_argument('--epoch', '-e', type=COUNT, default=20,
                        help='Number of sweeps over the dataset to train')
    parser.add_argument('--out', '-o', default='results/mnist',
                        help='Directory to output the result')
    parser.add_argument('--unit', '-u', type=COUNT, default=1000,
                        help='Number of units')
    parser.add_argument('--data-dir', default=DEFAULT_MNIST_DIR,
                        help='directory with MNIST-format IDX files (default: %(default)s)')
    parser.add_argument('--seed', type=command_line.arg_type('seed'), default=0, help='random seed')
    parser.add_argument('--progress', action='store_true', help='show a progress bar')
    parser.add_argument('--limit', type=COUNT, default=None, metavar='N',
                        help='use only the first N training and N test images (smoke tests)')
    command_line.add_option(parser, 'virtual_ranks', metavar='V',
                            help='train as V ranks on any number of processes <= V (each its '
                                 'shard, batch and order; the exact sum): the same model on '
                                 'any number of processes')
    cpu = parser.add_argument_group('CPU multi-node optimizer (chainermn_torus)')
    cpu.add_argument('--optimizer', choices=sorted(OPTIMIZERS), default='adam')
    cpu.add_argument('--lr', type=command_line.arg_type('positive'), default=None,
                     help='learning rate (Adam: alpha) for the whole batch; default: the '
                          "optimizer's default (Adam 0.001), or with --warmup-epochs the "
                          'default scaled by the number of ranks (linear scaling rule)')
    cpu.add_argument('--warmup-epochs', type=command_line.arg_type('non-negative'), default=0,
                     help='Goyal et al.: ramp the learning rate linearly from the one-rank '
                          'value to the scaled one over this many epochs')
    # The CPU optimizer's settings, from their rows (flag, else variable, else default); this
    # example's own defaults: the fused update with flush-to-zero.
    command_line.add_option(cpu, 'fused', default=True, help='fused numba update')
    command_line.add_option(cpu, 'flush_denormals', dest='ftz', default=True,
                      help='flush-to-zero / denormals-are-zero in the update')
    command_line.add_option(cpu, 'double_buffering', help='overlap the all-reduce with the next '
                      'step (1-step-stale gradients)')
    command_line.add_option(cpu, 'overlap',
                      help="average gradient buckets during backward (this step's gradients)")
    command_line.add_option(cpu, 'fp16_allreduce',
                            help='send gradients as float16 (half the bytes)')
    command_line.add_option(cpu, 'check_finite',
                      help='stop with the rank named if a gradient is NaN/Inf')
    checkpoint.add_arguments(cpu)
    command_line.add_option(cpu, 'check_replicas', metavar='K',
                      help='every K steps, stop if the parameters differ between ranks')
    command_line.add_option(cpu, 'timeline', metavar='PREFIX',
                      help='record phase times on every rank into PREFIX.rank<R>.json '
                           '(chainermn-torus timeline merge|plot PREFIX)')
    cpu.add_argument('--stock', action='store_true',
                     help="ChainerMN's own wrapper and Chainer's update (baseline)")
    # The command line, and what it left filled in: the variable, else the default.
    args, flags = command_line.parse_command_line(parser)
    checkpoint.check_arguments(parser, args)

    kwargs = {'grid': args.grid} if args.grid else {}
    if args.fp16_allreduce:
        kwargs['allreduce_grad_dtype'] = numpy.float16
    # The process configured as this package configures it (its threads and timeline with
    # the flags here), for ChainerMN's communicators too; a bad value ends in one line.
    setup = chainermn_torus.init(flags=flags)
    # --virtual-ranks, else the variable or the launcher's (the settings the communicator
    # reads too)
    args.virtual_ranks = setup.settings['virtual_ranks']
    if args.virtual_ranks and args.stock:
        parser.error('--virtual-ranks goes with this package\'s optimizer, not --stock')
    comm = chainermn.create_communicator(args.communicator, **kwargs)
    budget = setup.applied()['threads']
    comm_stats = time_gradient_communication(comm)
    numpy.random.seed(args.seed)  # same initial weights everywhere; bcast_data makes sure

    ranks = args.virtual_ranks or comm.size   # the ranks the job computes as
    # The communicator actually made (chainermn_torus.run --communicator may override the
    # script's own choice; ChainerMN's communicators have no name: keep the argument).
    used = getattr(comm, 'name', None) or args.communicator
    if comm.rank == 0:
        print('==========================================')
        print(f'Num process (COMM_WORLD): {comm.size}')
        print('Using {} communicator{}'.format(
            used, ': ' + comm.describe() if hasattr(comm, 'describe') else ''))
        print(f'Num unit: {args.unit}')
        print(f'Num Minibatch-size: {args.batchsize}')
        print(f'Num epoch: {args.epoch}')
        print('Optimizer: {}{}'.format(args.optimizer, ' (stock ChainerMN wrapper)' if args.stock
                                       else f': fused={args.fused} flush_denormals={args.ftz} '
                                            f'double_buffering={args.double_buffering} '
                                       f'overlap={args.overlap} '
                                       f'fp16_allreduce={args.fp16_allreduce}'))
        print(f'Data: {args.data_dir}')
        print('==========================================')

    model = L.Classifier(MLP(args.unit, 10))
    make, lr_attr, default_lr = OPTIMIZERS[args.optimizer]
    lr = args.lr
    if lr is None:  # linear scaling rule only when warming up to it
        lr = linear_scaling(default_lr, ranks, 1) if args.warmup_epochs else default_lr
    actual = make(lr)
    if args.stock:
        optimizer = chainermn.optimizers.create_multi_node_optimizer(
            actual, comm, double_buffering=args.double_buffering)
    else:
        optimizer = chainermn.create_multi_node_optimizer(
            actual, comm, double_buffering=args.double_buffering, fused=args.fused,
            flush_denormals=args.ftz, check_finite=args.check_finite, overlap=args.overlap,
            check_replicas=args.check_replicas)
    optimizer.setup(model)

    # Rank 0 reads the data (a missing directory fails there) and every rank learns of it;
    # with virtual ranks every process reads it (each cuts its virtual ranks' shards).
    error = None
    if comm.rank == 0 or args.virtual_ranks:
        try:
            train, test = load_mnist_idx(args.data_dir, n_classes=10, limit=args.limit)
            error = batch_too_large(len(train), args.batchsize, ranks, limit=args.limit)
        except (OSError, ValueError) as e:
            error, train, test = str(e), None, None
    else:
        train, test = None, None
    error = comm.mpi_comm.bcast(error, root=0)
    if error is not None:
        report.stop(error, comm.rank)  # the same on every rank: rank 0 says it
    if args.virtual_ranks:
        shards = virtual_shards(train, ranks, comm.held, shuffle=True, seed=args.seed)
        test_shards = virtual_shards(test, ranks, comm.held, shuffle=True, seed=args.seed)
    else:
        train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=args.seed)
        test_shards = [chainermn.scatter_dataset(test, comm, shuffle=True, seed=args.seed)]

    if args.virtual_ranks:
        # each virtual rank's orders keyed by it: the same on any process count
        train_iters = [chainer.iterators.SerialIterator(
            shard, args.batchsize, order_sampler=KeyedOrder(args.seed, v))
            for shard, v in zip(shards, comm.held)]
        train_iter = train_iters[0]
    else:
        train_iter = chainer.iterators.SerialIterator(train, args.batchsize)
    test_iters = [chainer.iterators.SerialIterator(shard, args.batchsize, repeat=False,
                                                   shuffle=False) for shard in test_shards]
    # Now, on every rank, not after training: the output directory walked and held, and its
    # names holding nothing of another user's (extensions.outputs).
    out = checkpoint.check_output(comm, args.out, ('summary.json', 'model_final.npz', 'log'),
                                  args.trust_out_dir)
    if args.virtual_ranks:
        updater = VirtualRanksUpdater(train_iters, optimizer, device=-1)
    else:
        updater = training.StandardUpdater(train_iter, optimizer, device=-1)
    trainer = training.Trainer(updater, (args.epoch, 'epoch'), out=args.out)
    if args.warmup_epochs:
        trainer.extend(GradualWarmup(target_lr=lr, start_lr=lr / ranks,
                                     duration=args.warmup_epochs, attr=lr_attr))

    evaluator = extensions.Evaluator(test_iters[0], model, device=-1)
    if args.virtual_ranks:   # each held virtual rank's shard; the mean in their order
        evaluator = evaluate_over_virtual_ranks(evaluator, comm, test_iters,
                                                lambda: updater.held_states)
    else:
        evaluator = chainermn.create_multi_node_evaluator(evaluator, comm)
    trainer.extend(evaluator)

    if comm.rank == 0:
        trainer.extend(outputs.hold_reports(extensions.LogReport(), out))
        trainer.extend(extensions.PrintReport(
            ['epoch', 'main/loss', 'validation/main/loss',
             'main/accuracy', 'validation/main/accuracy', 'elapsed_time']))
        if args.progress:
            trainer.extend(extensions.ProgressBar())

    # --checkpoint-dir, --resume, ...; --resume-batch scale on another rank count scales the
    # learning rate by Goyal et al.'s linear rule.
    checkpoint.attach(comm, trainer, args, lr_rule=linear_scaling, settings=setup.settings)

    t0 = time.perf_counter()
    trainer.run()
    if getattr(optimizer, 'watchdog', None) is not None:
        optimizer.watchdog.training_over()  # the final evaluation is watched as such
    if hasattr(optimizer, 'finalize'):
        optimizer.finalize()  # double buffering, overlap: the communication thread
    train_seconds = time.perf_counter() - t0

    final = evaluator()  # averaged over ranks by the multi-node evaluator
    if (args.double_buffering or args.overlap) and not args.stock:
        # The all-reduce ran in the background thread on a clone of the communicator: count
        # its time there, and how long training waited for it.
        comm_stats = {'seconds': optimizer.timings['communicate'],
                      'calls': optimizer.iterations}
    wait_seconds = comm.allreduce_obj(getattr(optimizer, 'timings', {}).get('wait', 0.0)) \
        / comm.size
    comm_seconds = comm.allreduce_obj(comm_stats['seconds']) / comm.size
    if comm.rank == 0:
        summary = {
            'communicator': used, 'ranks': comm.size, 'virtual_ranks': args.virtual_ranks,
            'epochs': args.epoch,
            'optimizer': args.optimizer, 'stock': args.stock, 'fused': args.fused,
            'flush_denormals': args.ftz, 'double_buffering': args.double_buffering,
            'overlap': args.overlap,
            'fp16_allreduce': args.fp16_allreduce, 'threads': budget['threads'],
            'batchsize_per_rank': args.batchsize, 'unit': args.unit,
            'test_accuracy': float(final['validation/main/accuracy']),
            'test_loss': float(final['validation/main/loss']),
            'train_seconds': train_seconds,
            'gradient_communication_seconds': comm_seconds,
            'gradient_communication_calls': comm_stats['calls'],
            'waited_for_communication_seconds': wait_seconds,
        }
        print('test accuracy: {:.4f}   training time: {:.1f} s   gradient communication: '
              '{:.2f} s ({:.1f}% of training, {} calls, {:.2f} ms each, mean over ranks){}'
              .format(summary['test_accuracy'], train_seconds, comm_seconds,
                      100.0 * comm_seconds / train_seconds, comm_stats['calls'],
                      1e3 * comm_seconds / max(comm_stats['calls'], 1),
                      '; waited for it {:.2f} s ({})'.format(
                          wait_seconds, 'overlap' if args.overlap else 'double buffering')
                      if (args.double_buffering or args.overlap) and not args.stock else ''))
        # Uncompressed: zlib takes 0.36 CPU-s on this model's 7 MB of float32 and saves
        # under a tenth of it. Each a new file renamed over its name in the held directory.
        outputs.write(out, 'model_final.npz',
                      lambda f: chainer.serializers.save_npz(f, model, compression=False))
        outputs.write(out, 'summary.json', lambda f: json.dump(summary, f, indent=2), mode='w')


if __name__ == '__main__':
    main()
