"""What snapshots in node memory cost a job that loses nothing (issue 73), two ways:

* the MNIST example on 2 ranks, 1 epoch of Fashion-MNIST (300 steps), its training time
  without snapshots and with ``--memory-snapshots K`` for each K, in turns (the order
  rotating each round), medians and ratios to none;
* ``--in-process``: in one 2-rank job, the example's model (MLP 784-1000-1000-10, Adam,
  batch 100 per rank) on Fashion-MNIST, each training step timed and a snapshot taken and
  timed after every ``--every`` steps; the cost of snapshots every K steps is then the
  median snapshot over K median steps, for each K (finer than whole runs, whose spread on
  this VM is larger than the cost). ``--model tiny``: the ImageNet example's tiny net
  (MomentumSGD, batch 32 per rank of 64x64 images, decoded already) instead.

    python scripts/snapshot_cost.py --ks 50 100 200 --rounds 5 --json FILE
    python scripts/snapshot_cost.py --in-process --ks 25 50 100 200 --json FILE
    python scripts/snapshot_cost.py --in-process --model tiny --ks 25 50 100 200 --json FILE
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py')
_TIME = re.compile(r'training time: ([0-9.]+) s')


def run_once(k, where):
    mpiexec = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
    cmd = [mpiexec, '-n', '2', sys.executable, EXAMPLE, '--epoch', '1', '--out',
           os.path.join(where, 'out')]
    if k:
        cmd += ['--memory-snapshots', str(k), '--memory-dir', os.path.join(where, 'mem')]
    env = dict(os.environ, OMP_NUM_THREADS='1')
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600,
                         check=True).stdout
    return float(_TIME.search(out).group(1))


def in_process_worker(steps, every, out, model_name='mnist'):
    """The 2-rank job of ``--in-process`` (run under mpiexec by ``in_process``)."""
    import time
    import chainermn_torus  # noqa: F401 first (Chainer imports after it on 3.12)
    import chainer
    import chainermn
    import numpy
    from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR, load_mnist_idx
    from chainermn_torus.extensions.checkpoint.in_memory import MemorySnapshot
    from chainermn_torus.models import MLP, TinyNet
    comm = chainermn.create_communicator('rsap')
    numpy.random.seed(0)
    if model_name == 'tiny':
        # The ImageNet example's --arch tiny (64x64 crops, MomentumSGD, batch 32 per rank) on
        # images already decoded: a step without JPEG decoding is the shortest it can be,
        # so the snapshot's share is an upper bound.
        model = chainer.links.Classifier(TinyNet(10))
        base = chainer.optimizers.MomentumSGD(lr=0.1)
        x = numpy.random.rand(2048, 3, 64, 64).astype(numpy.float32)
        train = chainer.datasets.TupleDataset(x, numpy.random.randint(0, 10, 2048).astype(
            numpy.int32))
        batch = 32
    else:
        model = chainer.links.Classifier(MLP(1000, 10))
        base = chainer.optimizers.Adam()
        train, _ = load_mnist_idx(DEFAULT_MNIST_DIR)
        batch = 100
    opt = chainermn.create_multi_node_optimizer(base, comm)
    opt.setup(model)
    train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=0)
    it = chainer.iterators.SerialIterator(train, batch)
    tr = chainer.training.Trainer(chainer.training.StandardUpdater(it, opt), (1, 'iteration'))
    tr.run()  # the trainer started, the optimizer's state made
    snap = MemorySnapshot(comm, out)
    step_s, snap_s = [], []
    for i in range(steps):
        comm.mpi_comm.Barrier()
        t0 = time.perf_counter()
        tr.updater.update()
        step_s.append(time.perf_counter() - t0)
        if (i + 1) % every == 0:
            comm.mpi_comm.Barrier()
            t0 = time.perf_counter()
            snap.save(tr)
            snap_s.append(time.perf_counter() - t0)
    snap.finalize()
    if comm.rank == 0:
        print(json.dumps({'step_s': step_s, 'snapshot_s': snap_s}), flush=True)


def in_process(ks, steps, every, model='mnist'):
    where = tempfile.mkdtemp(prefix='snapshot-cost-', dir='/dev/shm')
    mpiexec = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
    try:
        out = subprocess.run([mpiexec, '-n', '2', sys.executable, os.path.abspath(__file__),
                              '--worker', str(steps), str(every), os.path.join(where, 'mem'),
                              model],
                             capture_output=True, text=True, timeout=1200, check=True,
                             env=dict(os.environ, OMP_NUM_THREADS='1',
                                      CHAINERMN_TORUS_QUIET='1')).stdout
    finally:
        shutil.rmtree(where, ignore_errors=True)
    data = json.loads(out.strip().splitlines()[-1])
    step, snap = statistics.median(data['step_s']), statistics.median(data['snapshot_s'])
    print('in one 2-rank job: median step {:.1f} ms ({} steps), median snapshot {:.1f} ms '
          '({} snapshots)'.format(1e3 * step, len(data['step_s']), 1e3 * snap,
                                  len(data['snapshot_s'])), flush=True)
    rows = {}
    for k in ks:
        rows[str(k)] = snap / (k * step)
        print(f'  K = {k:>4}: snapshots add {rows[str(k)]:.2%} to the steps',
              flush=True)
    return dict(data, median_step_s=step, median_snapshot_s=snap, cost_by_k=rows)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ['--worker']:
        return in_process_worker(int(argv[1]), int(argv[2]), argv[3], argv[4])
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--ks', type=int, nargs='+', default=[50, 100, 200])
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--in-process', action='store_true')
    p.add_argument('--steps', type=int, default=300)
    p.add_argument('--every', type=int, default=10)
    p.add_argument('--model', choices=('mnist', 'tiny'), default='mnist',
                   help="--in-process: the MNIST example's MLP, or the ImageNet example's "
                        'tiny ResNet-like net')
    p.add_argument('--json', default=None)
    args = p.parse_args(argv)
    if args.in_process:
        result = in_process(args.ks, args.steps, args.every, args.model)
        if args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, 'w') as f:
                json.dump(dict(result, example=args.model, ranks=2), f, indent=1)
        return 0
    configs = [0] + args.ks
    times = {k: [] for k in configs}
    where = tempfile.mkdtemp(prefix='snapshot-cost-', dir='/dev/shm')
    try:
        for i in range(args.rounds):
            for k in configs[i % len(configs):] + configs[:i % len(configs)]:
                times[k].append(run_once(k, where))
    finally:
        shutil.rmtree(where, ignore_errors=True)
    none = statistics.median(times[0])
    rows = {}
    for k in configs:
        med = statistics.median(times[k])
        rows[str(k)] = {'seconds': times[k], 'median_s': med, 'ratio_to_none': med / none}
        print('{:>12s}: training time median of {} {:.2f} s, {:.3f} x none'.format(
            'none' if not k else f'K = {k}', args.rounds, med, med / none),
            flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, 'w') as f:
            json.dump({'example': 'mnist', 'ranks': 2, 'epochs': 1, 'rounds': args.rounds,
                       'rows': rows}, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
