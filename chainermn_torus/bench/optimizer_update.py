"""Benchmark: the optimizer update alone, stock Chainer vs fused, on one process.

    python -m chainermn_torus.bench.optimizer_update --model resnet50 --optimizer adam

Rows, interleaved round by round so that machine noise hits all of them alike:

* ``stock``: ``chainer.optimizers.<X>.update()`` (numpy expressions per parameter);
* ``fused-per-array``: the fused rule, one kernel call per parameter (gradients as separate
  arrays, as after ChainerMN's ``naive``);
* ``fused-flat``: one kernel call over the flat model (gradients contiguous, as after a
  ``chainermn_torus`` communicator);
* ``copy``: a parallel copy of the parameter array, the classic bandwidth reference (it
  counts 2 arrays; the hardware also reads the destination before writing it);
* ``same-traffic``: a kernel that reads and writes the same arrays as the rule with no
  arithmetic: the floor a memory-bound update cannot go below.

Effective bandwidth = bytes the rule must read and write (Adam: p, g, m, v read, p, m, v
written) / time. ``--denormal`` makes every gradient zero and fills the state with subnormal
numbers, which then stay subnormal for about a hundred steps as they decay (what weights of
dead units and always-black pixels do in real training), to show what flush-to-zero
(``--ftz``) saves.
"""
import argparse
import json
import time

import chainer
import numba
import numpy
from numba import prange

from chainermn_torus import command_line
from chainermn_torus.algorithms.gradient_sets import model_params
from chainermn_torus.optimizers import fuse, kernels
from chainermn_torus.runtime.cpu import threads

# arrays read + arrays written per element, by optimizer
_TRAFFIC = {'adam': 7, 'momentum_sgd': 5, 'rmsprop': 5}
_CLASSES = {'adam': chainer.optimizers.Adam, 'momentum_sgd': chainer.optimizers.MomentumSGD,
            'rmsprop': chainer.optimizers.RMSprop}


@numba.njit(parallel=True, cache=True)
def _traffic4(p, g, m, v):
    for i in prange(p.size):  # read p, g, m, v; write p, m, v
        a = g[i]
        m[i] = m[i] + a
        v[i] = v[i] + a
        p[i] = p[i] + a


@numba.njit(parallel=True, cache=True)
def _traffic3(p, g, s):
    for i in prange(p.size):  # read p, g, s; write p, s
        a = g[i]
        s[i] = s[i] + a
        p[i] = p[i] + a


class _Holder(chainer.Link):
    """A link holding parameters of the given shapes (names sort in creation order)."""

    def __init__(self, shapes, seed):
        super().__init__()
        rng = numpy.random.RandomState(seed)
        with self.init_scope():
            for i, shape in enumerate(shapes):
                setattr(self, f'p{i:04d}',
                        chainer.Parameter(rng.standard_normal(shape).astype(numpy.float32)))


def _setup(name, shapes, grads, flat_grads, fused, denormal):
    link = _Holder(shapes, seed=0)
    opt = _CLASSES[name]()
    if fused:
        opt = fuse(opt)
    opt.setup(link)
    params = [p for _, p in sorted(link.namedparams())]
    off = 0
    for p, g in zip(params, grads):
        p.grad = flat_grads[off:off + g.size].reshape(g.shape) if flat_grads is not None else g
        off += g.size
    opt.update()  # allocates state (and, fused, the flat arrays; compiles the kernel)
    if denormal:
        for p in params:
            for s in p.update_rule.state.values():
                s[...] = numpy.float32(1e-39)
    return opt


def run(model='resnet50', optimizer='adam', rounds=10, warmup=2, denormal=False, ftz=False,
        threads_per_rank=None):
    budget = threads.apply_thread_budget(threads_per_rank, intra_size=1)
    shapes = [shape for _, shape in model_params(model)]
    n = int(sum(numpy.prod(s) for s in shapes))
    rng = numpy.random.RandomState(1)
    grads = [rng.standard_normal(s).astype(numpy.float32) * (0.0 if denormal else 1e-3)
             for s in shapes]
    flat_grads = numpy.concatenate([g.ravel() for g in grads])
    rows = {
        'stock': _setup(optimizer, shapes, grads, None, False, denormal),
        'fused-per-array': _setup(optimizer, shapes, grads, None, True, denormal),
        'fused-flat': _setup(optimizer, shapes, grads, flat_grads, True, denormal),
    }
    for name in ('fused-per-array', 'fused-flat'):
        rows[name].flush_denormals = ftz
    src = numpy.ones(n, numpy.float32)
    dst = numpy.empty_like(src)
    kernels.copy(dst, src)
    arrays = [numpy.zeros(n, numpy.float32) for _ in range(4 if optimizer == 'adam' else 3)]
    traffic = _traffic4 if optimizer == 'adam' else _traffic3
    traffic(*arrays)
    times = {k: [] for k in list(rows) + ['copy', 'same-traffic']}
    for r in range(warmup + rounds):
        for name, opt in rows.items():
            t0 = time.perf_counter()
            opt.update()
            dt = time.perf_counter() - t0
            if r >= warmup:
                times[name].append(dt)
        t0 = time.perf_counter()
        kernels.copy(dst, src)
        t1 = time.perf_counter()
        traffic(*arrays)
        if r >= warmup:
            times['copy'].append(t1 - t0)
            times['same-traffic'].append(time.perf_counter() - t1)
    assert rows['fused-flat'].flat_steps == warmup + rounds + 1, 'flat path not taken'
    copy_med = float(numpy.median(times['copy']))
    copy_bw = 2 * n * 4 / copy_med
    traffic_bytes = _TRAFFIC[optimizer] * n * 4
    stock_med = float(numpy.median(times['stock']))
    floor_med = float(numpy.median(times['same-traffic']))
    result = {'model': model, 'optimizer': optimizer, 'elements': n, 'rounds': rounds,
              'denormal_state': denormal, 'ftz': ftz, 'threads': budget,
              'copy_bandwidth_GBps': copy_bw / 1e9, 'rows': {}}
    for name, ts in times.items():
        med = float(numpy.median(ts))
        bytes_moved = 2 * n * 4 if name == 'copy' else traffic_bytes
        result['rows'][name] = {
            'median_ms': med * 1e3, 'min_ms': float(numpy.min(ts)) * 1e3,
            'speedup_vs_stock': stock_med / med,
            'effective_GBps': bytes_moved / med / 1e9,
            'fraction_of_copy_bw': bytes_moved / med / copy_bw,
            'floor_over_time': floor_med / med}
    return result


def format_table(res):
    lines = ['{} update on {} ({:,} float32 elements), {} rounds, threads {}, denormal state {}, '
             'ftz {}'.format(res['optimizer'], res['model'], res['elements'], res['rounds'],
                             res['threads']['threads'], res['denormal_state'], res['ftz']),
             '{:<16} {:>10} {:>10} {:>9} {:>9} {:>8} {:>9}'.format(
                 'row', 'median ms', 'min ms', 'x stock', 'GB/s', 'of copy', 'of floor')]
    for name, r in res['rows'].items():
        lines.append('{:<16} {:>10.2f} {:>10.2f} {:>9.2f} {:>9.2f} {:>7.0%} {:>8.0%}'.format(
            name, r['median_ms'], r['min_ms'], r['speedup_vs_stock'], r['effective_GBps'],
            r['fraction_of_copy_bw'], r['floor_over_time']))
    lines.append('(GB/s: bytes the update must read and write / time; copy counts its 2 arrays; '
                 'of floor: the same-traffic kernel\'s time / this row\'s time)')
    return '\n'.join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--model', default='resnet50', help='resnet50, mlp')
    p.add_argument('--optimizer', default='adam', choices=sorted(_CLASSES))
    p.add_argument('--rounds', type=int, default=10)
    p.add_argument('--warmup', type=int, default=2)
    p.add_argument('--denormal', action='store_true', help='fill optimizer state with subnormals')
    p.add_argument('--ftz', action='store_true', help='fused rows flush denormals to zero')
    command_line.add_option(p, 'threads', counts=True)
    p.add_argument('--json', default=None)
    args = command_line.parse_args(p, argv)
    res = run(args.model, args.optimizer, args.rounds, args.warmup, args.denormal, args.ftz,
              args.threads)
    print(format_table(res))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(res, f, indent=1)


if __name__ == '__main__':
    main()
