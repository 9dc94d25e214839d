"""Gradient all-reduce benchmark: ChainerMN naive vs one MPI_Allreduce vs ours, same run.

    mpiexec -n 4 python -m chainermn_torus.bench.allreduce --model resnet50 --json out.json

Every row times ``multi_node_mean_grad`` on the same model (ResNet-50 or MNIST-MLP shapes),
rows interleaved round by round so machine noise hits all alike. The time of a call is the
slowest rank's (a barrier precedes each call); the table shows the median over rounds, the
ratio to ChainerMN ``naive``, the algorithm bandwidth (bytes / time) and the bus bandwidth
(nccl-tests' definition: algbw x 2(P-1)/P). Reference rows:
  naive             ChainerMN's CPU communicator, one MPI_Allreduce per array;
  allreduce_1msg    one MPI_Allreduce of the already packed buffer (no pack, no division);
  copy_bound        2(P-1)/P x bytes at the memory-copy bandwidth measured with all ranks
                    copying at once: what shared memory allows at best.
Torus rows are named by variant (``algorithms.variants``): rsaa, rsap (fence),
rsap_notify, rsap_acc, shm, and rsap_pscw only when asked for. With ``--debug`` every communicator
row gets a twin ``NAME/debug`` timed under ``chainer.set_debug(True)``: the cost of the finite check
ChainerMN's communicators (and ours) make on the averaged gradients in debug mode. With
``--exact`` every row of ours gets a twin ``NAME/exact`` made with ``exact_sum=True`` (64-bit
integers on the wire, ``communicators._exact``), and the report gives its time against its twin's
(``ratio_to_plain``).
"""
import json
import os
import platform
import statistics
import sys
import time

import chainer
import numpy
from mpi4py import MPI

import chainermn
import chainermn_torus
from chainermn_torus.algorithms import variants
from chainermn_torus.bench.filled_gradients import GRADIENT_SETS, make_model
from chainermn_torus.communicators import create_variant
from chainermn_torus.communicators._grid import parse_grid
from chainermn_torus.runtime.report import format_bytes
from chainermn_torus.runtime import world


# Grid rows are the variants table's (algorithms.variants): each name pins its
# communicator and options, so that on one node plain rsaa/rsap do not silently become shm.
VARIANTS = variants.benchmarked(asked=True)
DEFAULT_VARIANTS = variants.benchmarked()
ALWAYS = variants.benchmarked(always=True)  # the reference row of ours in every run


def _grids(size, requested):
    if requested:
        return [g for g in requested]
    shapes = []
    for m in range(size, 0, -1):
        if size % m == 0 and m > 1:
            shapes.append(f'{m}x{size // m}')
    return shapes or ['1x1']


def timed(comm, fn):
    """Seconds of ``fn()`` from a barrier, the slowest rank's (every benchmark of one call)."""
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return comm.allreduce(dt, op=MPI.MAX)


def _copy_bandwidth(comm, nbytes, rounds=5):
    src = numpy.ones(nbytes // 4, dtype=numpy.float32)
    dst = numpy.empty_like(src)
    times = [timed(comm, lambda: numpy.copyto(dst, src)) for _ in range(rounds)]
    return src.nbytes / statistics.median(times)


def run(args):
    world = MPI.COMM_WORLD
    P = world.size
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    ranks_per_node = node.size
    node.Free()
    model = make_model(args.model, seed=world.rank)
    params = [p for _, p in sorted(model.namedparams())]
    nbytes = sum(p.grad.nbytes for p in params)
    grads0 = [p.grad.copy() for p in params]
    fresh = [g.copy() for g in grads0]

    rows = {}  # name -> callable

    def restore():
        # As after a backward pass: gradients in arrays of their own, not in any buffer.
        for p, f, g in zip(params, fresh, grads0):
            f[...] = g
            p.grad = f

    naive = chainermn.create_communicator('naive')
    rows['naive'] = lambda: naive.multi_node_mean_grad(model)
    packed = numpy.concatenate([g.ravel() for g in grads0])
    rows['allreduce_1msg'] = lambda: world.Allreduce(MPI.IN_PLACE, [packed, MPI.FLOAT])
    comms = {}
    for seg in args.segments:
        label = '' if seg is None else '/seg={}'.format(
            format_bytes(seg, exact=True).replace(' ', '') if seg else 'none')
        for variant in ALWAYS + [v for v in args.variants
                                 if not variants.get(v).grid and v not in ALWAYS]:
            comms[variant + label] = create_variant(variant, segment_size=seg)
            if args.exact:
                comms[variant + label + '/exact'] = create_variant(
                    variant, segment_size=seg, exact_sum=True)
        for g in _grids(P, args.grids):
            M = parse_grid(g, P, source='--grids')[0]
            for variant in [v for v in args.variants if variants.get(v).grid]:
                algorithm = variants.get(variant).algorithm
                try:
                    if algorithm is not None:
                        algorithm.check_placement(M, ranks_per_node)
                except ValueError:
                    continue  # shm with rows across nodes: no such row for this grid
                comm = create_variant(variant, grid=g, segment_size=seg)
                comms[f'{variant}({g}){label}'] = comm
                if args.exact:
                    comms[f'{variant}({g}){label}/exact'] = create_variant(
                        variant, grid=g, segment_size=seg, exact_sum=True)
    if args.auto:
        comms['auto'] = chainermn_torus.create_communicator('auto')
    # float16 / bfloat16 on the wire: half the bytes, plus the conversions (communicators._half)
    for asked, label, wire in ((args.fp16, 'fp16', numpy.float16),
                               (args.bf16, 'bf16', 'bfloat16')):
        if not asked:
            continue
        comms['pure_allreduce/' + label] = chainermn_torus.create_communicator(
            'pure_allreduce', allreduce_grad_dtype=wire)
        for g in _grids(P, args.grids):
            for algo in ('rsaa', 'rsap'):
                comms[f'{algo}({g})/{label}'] = \
                    chainermn_torus.create_communicator(algo, grid=g,
                                                        allreduce_grad_dtype=wire)
    for name, c in comms.items():
        rows[name] = (lambda c: lambda: c.multi_node_mean_grad(model))(c)
    if args.chainer_debug:
        for name in [n for n in rows if n != 'allreduce_1msg']:
            rows[name + '/debug'] = _in_debug_mode(rows[name])

    times = {name: [] for name in rows}
    for _ in range(args.warmup):
        for name, fn in rows.items():
            restore()
            timed(world, fn)
    for _ in range(args.rounds):
        for name, fn in rows.items():
            restore()
            times[name].append(timed(world, fn))
    copy_bw = _copy_bandwidth(world, nbytes)
    bound = 2.0 * (P - 1) / P * nbytes / copy_bw if P > 1 else 0.0

    med = {name: statistics.median(t) for name, t in times.items()}
    base = med['naive']
    results = []
    for name in rows:
        m = med[name]
        algbw = nbytes / m if m > 0 else float('inf')
        results.append({
            'name': name, 'median_ms': 1e3 * m, 'min_ms': 1e3 * min(times[name]),
            'ratio_to_naive': m / base if base > 0 else float('nan'),
            'algbw_GBps': algbw / 1e9, 'busbw_GBps': algbw * 2.0 * (P - 1) / P / 1e9})
        if name.endswith('/exact'):
            # each round's pair, as the rows ran one after the other in that round
            plain = name[:-len('/exact')]
            results[-1]['ratio_to_plain'] = m / med[plain]
            results[-1]['paired_ratio_to_plain'] = statistics.median(
                e / p for e, p in zip(times[name], times[plain]))
    results.append({'name': 'copy_bound', 'median_ms': 1e3 * bound, 'min_ms': 1e3 * bound,
                    'ratio_to_naive': bound / base if base > 0 else float('nan'),
                    'algbw_GBps': (nbytes / bound / 1e9) if bound else float('inf'),
                    'busbw_GBps': copy_bw / 1e9})
    report = {
        'model': args.model, 'ranks': P, 'bytes': nbytes,
        'arrays': len(params), 'rounds': args.rounds, 'warmup': args.warmup,
        'copy_bandwidth_GBps': copy_bw / 1e9, 'host': platform.node(),
        'mpi': MPI.Get_library_version().strip('\x00 \n').splitlines()[0].strip(),
        'nodes': len(set(world.allgather(platform.node()))),
        'mpi_env': {k: v for k, v in os.environ.items()
                    if k.startswith(('MPIR_CVAR', 'UCX_', 'I_MPI_', 'FI_', 'OMPI_MCA_',
                                     'PRTE_MCA_'))},
        'auto_choice': comms['auto'].describe() if 'auto' in comms else None,
        'results': results,
    }
    for c in comms.values():
        c.finalize()
    return report


def _in_debug_mode(fn):
    def call():
        with chainer.using_config('debug', True):
            fn()
    return call


def format_table(report):
    lines = ['{} gradients: {} arrays, {:.1f} MB float32, P = {} ({}; copy bandwidth {:.1f} '
             'GB/s with all ranks copying), median of {} rounds'.format(
                 report['model'], report['arrays'], report['bytes'] / 1e6, report['ranks'],
                 report['mpi'], report['copy_bandwidth_GBps'], report['rounds']),
             '{:<34} {:>10} {:>10} {:>9} {:>10} {:>10} {:>8}'.format(
                 'communicator', 'median ms', 'min ms', 'x naive', 'algbw GB/s',
                 'busbw GB/s', 'x plain')]
    for r in report['results']:
        plain = r.get('ratio_to_plain')
        lines.append('{:<34} {:>10.2f} {:>10.2f} {:>9.2f} {:>10.2f} {:>10.2f} {:>8}'.format(
            r['name'], r['median_ms'], r['min_ms'], r['ratio_to_naive'], r['algbw_GBps'],
            r['busbw_GBps'], '' if plain is None else f'{plain:.2f}'))
    return '\n'.join(lines)


def _segment(value):
    if value in ('default', ''):
        return None
    return int(float(value))


def build_parser():
    parser = world.ArgumentParser(prog='chainermn-torus bench allreduce',
                                     description=__doc__.split('\n')[0])
    parser.add_argument('--model', choices=sorted(GRADIENT_SETS), default='resnet50')
    parser.add_argument('--rounds', type=int, default=15)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--grids', nargs='*', default=None, metavar='MxN',
                        help='grid shapes for rsaa/rsap (default: every M > 1 dividing P)')
    parser.add_argument('--segments', nargs='*', type=_segment, default=[None],
                        metavar='BYTES', help='segment sizes to compare (0 = one message, '
                        '"default" = the built-in default)')
    parser.add_argument('--variants', nargs='*', default=DEFAULT_VARIANTS, choices=list(VARIANTS),
                        help='variants (grid ones on every grid; default: all but '
                        'rsap_pscw); shm rows only where the grid rows lie inside nodes')
    parser.add_argument('--no-auto', dest='auto', action='store_false',
                        help='leave out the auto communicator\'s row')
    parser.add_argument('--fp16', action='store_true',
                        help='also rows with allreduce_grad_dtype=float16')
    parser.add_argument('--bf16', action='store_true',
                        help="also rows with allreduce_grad_dtype='bfloat16'")
    parser.add_argument('--exact', action='store_true',
                        help='a twin NAME/exact of every row of ours, with exact_sum=True')
    parser.add_argument('--chainer-debug', action='store_true',
                        help='also every communicator row in Chainer\'s debug mode')
    parser.add_argument('--json', default=None, help='write the report here (rank 0)')
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.rounds < 1:
        sys.exit(f'--rounds must be >= 1, got {args.rounds}')
    # The process as a job's rank has it (the thread budget above all: without it numba's
    # OpenMP team of each rank spins on the cores the other ranks wait on, and the shm rows'
    # kernels ran 60x slower, 1.3 s against 21 ms at P = 2); the rows below are made by
    # create_variant, which configures nothing.
    chainermn_torus.init()
    report = run(args)
    if MPI.COMM_WORLD.rank == 0:
        print(format_table(report), flush=True)
        if args.json:
            with open(args.json, 'w') as f:
                json.dump(report, f, indent=2)


if __name__ == '__main__':
    main()
