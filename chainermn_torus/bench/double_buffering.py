"""Benchmark: does double buffering hide the all-reduce behind the compute?

    mpiexec -n 2 python -m chainermn_torus.bench.double_buffering --payload resnet50

The model computes like the MNIST MLP (784-1000-1000-10, batch 100) but also carries a
"payload" of parameters with ResNet-50's shapes (or the MLP's, or none) whose gradients are
averaged with the rest and not updated (their rules are disabled): communication as long as a
large model's, compute of a small one. Two wrappers train side by side, in alternating blocks
of iterations: double buffering off and on.

Reported per iteration (medians): with it off, ``compute`` (data, forward/backward, update)
and ``communication`` (the all-reduce) and the iteration; with it on, the iteration. Target:
on <= 1.15 x max(compute, communication), against off ~ compute + communication.

Overlap needs something to overlap on. A shared-memory all-reduce is itself CPU work (memory
copies), so with every core computing (2 ranks on 2 cores) there is nothing to gain, and the
benchmark says so. On a cluster the all-reduce is mostly wire time; ``--link-gbps G`` emulates
a link of G Gbit/s by adding, inside the all-reduce, a sleep as long as the bytes each rank
sends over a ring (2 (P-1)/P of the buffer) take at that rate: time that costs no CPU, as on
a real network.
"""
import functools
import json
import time

import chainer
import chainer.functions as F
import numpy

import chainermn_torus
from chainermn_torus import command_line
from chainermn_torus import create_multi_node_optimizer
from chainermn_torus.algorithms.gradient_sets import model_params
from chainermn_torus.communicators import capabilities
from chainermn_torus.models import MLP
from chainermn_torus.runtime import world
from chainermn_torus.runtime.chainer_glue import patches


class Net(MLP):
    """The MNIST MLP, plus a payload of parameters that are only communicated."""

    def __init__(self, payload, unit=1000):
        super().__init__(unit)
        with self.init_scope():
            self.payload = chainer.Link()
        with self.payload.init_scope():
            for i, (_, shape) in enumerate(payload):
                setattr(self.payload, f'p{i:03d}',
                        chainer.Parameter(numpy.zeros(shape, numpy.float32)))

    def forward(self, x, t):
        return F.softmax_cross_entropy(super().forward(x), t)


def wait_for_wire(t0, nbytes, size, gbps):
    """Sleep until a ring all-reduce of ``nbytes`` over ``size`` ranks (2 (P - 1) / P of
    the bytes per rank) at ``gbps`` would have ended, counting from ``t0``."""
    wire = 2.0 * (size - 1) / size * nbytes * 8 / (gbps * 1e9)
    time.sleep(max(0.0, wire - (time.perf_counter() - t0)))


def _slow_link(fn, comm, gbps, stats):
    """Wrap an all-reduce call with the wire time of a ring all-reduce at ``gbps``."""
    @functools.wraps(fn)
    def wrapper(model, *args, **kwargs):
        t0 = time.perf_counter()
        result = fn(model, *args, **kwargs)
        if gbps:
            nbytes = sum(p.data.nbytes for _, p in model.namedparams() if p.data is not None)
            wait_for_wire(t0, nbytes, comm.size, gbps)
        stats['calls'] += 1
        return result
    return wrapper


def build(comm_name, payload, double_buffering, gbps, seed, poll):
    comm = chainermn_torus.create_communicator(comm_name)
    numpy.random.seed(seed)
    model = Net(payload)
    opt = create_multi_node_optimizer(chainer.optimizers.Adam(), comm,
                                      double_buffering=double_buffering, fused=True,
                                      background_poll=poll or None)
    opt.setup(model)
    for p in model.payload.params():
        p.update_rule.enabled = False  # communicated, not updated
    stats = {'calls': 0}
    target = opt.mode.background if double_buffering else comm
    name = 'mean_grad_in_slot' if double_buffering and capabilities.of(target).slots \
        else 'multi_node_mean_grad'
    patches.apply(target, name, _slow_link(getattr(target, name), comm, gbps, stats), 'timing',
                  'bench double-buffering slows the gradient calls to a given link speed')
    return comm, model, opt


def run(comm_name='rsap', payload='resnet50', iterations=60, block=10, gbps=0.0, seed=0,
        poll=None):
    shapes = model_params(payload) if payload != 'none' else []
    runs = {db: build(comm_name, shapes, db, gbps, seed, poll) for db in (False, True)}
    comm = runs[False][0]
    rng = numpy.random.RandomState(seed + comm.rank)
    x = rng.rand(100, 784).astype(numpy.float32)
    t = rng.randint(0, 10, 100).astype(numpy.int32)
    rows = {False: [], True: []}
    done = 0
    warm = 2 * block
    while done < iterations + warm:
        for db in (False, True):
            _, model, opt = runs[db]
            for _ in range(block):
                before = dict(opt.timings)
                t0 = time.perf_counter()
                opt.update(model, x, t)
                dt = time.perf_counter() - t0
                d = {k: opt.timings[k] - before[k] for k in before}
                rows[db].append((dt, d['forward_backward'] + d['update'], d['communicate'],
                                 d['wait']))
        done += block
    for db in (False, True):
        if hasattr(runs[db][2], 'finalize'):
            runs[db][2].finalize()
    off = numpy.median(numpy.array(rows[False][warm:]), axis=0)
    on = numpy.median(numpy.array(rows[True][warm:]), axis=0)
    compute, communication = float(off[1]), float(off[2])
    bound = max(compute, communication)
    result = {
        'ranks': comm.size, 'communicator': comm_name, 'payload': payload,
        'payload_elements': int(sum(numpy.prod(s) for _, s in shapes)),
        'link_gbps': gbps, 'iterations': iterations, 'background_poll_s': poll or None,
        'off': {'iteration_s': float(off[0]), 'compute_s': compute,
                'communication_s': communication},
        'on': {'iteration_s': float(on[0]), 'compute_s': float(on[1]),
               'wait_s': float(on[3])},
        'max_compute_communication_s': bound,
        'on_over_max': float(on[0]) / bound,
        'off_over_on': float(off[0]) / float(on[0]),
    }
    gathered = comm.mpi_comm.allgather(result)
    return gathered


def format_table(results):
    r = results[0]
    lines = ['double buffering, {} ranks, {}, payload {} ({:,} elements), link {}, thread {}'
             .format(r['ranks'], r['communicator'], r['payload'], r['payload_elements'],
                     '{} Gbit/s (emulated wire time)'.format(r['link_gbps']) if r['link_gbps']
                     else 'none (shared memory only)',
                     'polls every {:g} s'.format(r['background_poll_s'])
                     if r['background_poll_s'] else 'blocks in MPI'),
        '{:>4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8}'.format(
            'rank', 'compute', 'comm', 'iter off', 'iter on', 'wait on', 'on/max', 'off/on')]
    for rank, r in enumerate(results):
        lines.append('{:>4} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>10.3f} {:>7.2f}x'
                     .format(rank, 1e3 * r['off']['compute_s'], 1e3 * r['off']['communication_s'],
                             1e3 * r['off']['iteration_s'], 1e3 * r['on']['iteration_s'],
                             1e3 * r['on']['wait_s'], r['on_over_max'], r['off_over_on']))
    lines.append('(ms, medians; on/max = iteration with double buffering / max(compute, '
                 'communication); target <= 1.15)')
    return '\n'.join(lines)


def main(argv=None):
    p = world.ArgumentParser(description=__doc__.split('\n')[0])
    command_line.add_arguments(p, communicator='rsap', grid=False, threads=False)
    p.add_argument('--payload', default='resnet50', choices=['resnet50', 'mlp', 'none'])
    p.add_argument('--iterations', type=int, default=60)
    p.add_argument('--block', type=int, default=10)
    p.add_argument('--link-gbps', type=float, default=0.0,
                   help='emulate a link of this many Gbit/s (sleep for the wire time)')
    p.add_argument('--background-poll', type=float, default=0,
                   help='seconds between tests of the thread\'s collectives; 0 (default): '
                        'block in MPI')
    p.add_argument('--json', default=None)
    args = command_line.parse_args(p, argv)
    results = run(args.communicator, args.payload, args.iterations, args.block, args.link_gbps,
                  poll=args.background_poll)
    from mpi4py import MPI
    if MPI.COMM_WORLD.rank == 0:
        print(format_table(results))
        if args.json:
            with open(args.json, 'w') as f:
                json.dump(results, f, indent=1)


if __name__ == '__main__':
    main()
