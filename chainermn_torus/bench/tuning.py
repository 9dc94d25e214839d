"""Predicted ``auto``, tuned ``auto`` and an exhaustive sweep, measured in one run.

    mpiexec -n 4 python -m chainermn_torus.bench.tuning --model mlp --out tune.json

On the model's own gradient buffer (``bench.filled_gradients``):

1. predicted: what ``auto`` chooses without measuring (planner, then SimGrid where
   installed), and how long that took;
2. tuned: ``auto`` with ``tune='again'`` driven through gradient calls until it has chosen,
   with its own account of the cost;
3. the sweep: every planned variant on every grid shape that fits, each with the default
   segment size, 1 MiB and the whole buffer, then every configuration of the sweep (the two
   choices among them) timed ``--reps`` times, interleaved, each call from a barrier, the
   slowest rank's time counting; the median per configuration.

The report gives each choice's median against the sweep's best, and the tuning's cost
against ``--run-seconds`` (the run the cost is a share of: a one-epoch MNIST run, 50
ResNet-50 iterations).
"""
import argparse
import json
import statistics
import time

import numpy
from mpi4py import MPI

import chainermn_torus  # NOQA  (registers the factory)
from chainermn_torus import auto as _auto, command_line, config
from chainermn_torus.algorithms.gradient_sets import MODEL_BYTES
from chainermn_torus.bench.allreduce import timed
from chainermn_torus.bench.filled_gradients import GRADIENT_SETS, make_model
from chainermn_torus.communicators import create_variant
from chainermn_torus.planning import planner
from chainermn_torus.tuning import candidates

__all__ = ['run', 'main']


def _sweep_keys(nodes, R, nbytes, segments):
    """Every (variant, grid) the planner ranks on this job's nodes (a shared-memory row must
    lie inside a node: the planner leaves out the grids where it cannot), with each segment
    size; variants that build the same communicator are listed once."""
    keys = []
    for row in planner.plan(nodes, R, nbytes, planner.PRESETS['ofp']):
        for seg in segments:
            if candidates.key(row, seg) not in keys:
                keys.append(candidates.key(row, seg))
    return keys


def _chosen(comm, default):
    """The configuration ``comm`` (auto) chose, with its segment size in bytes."""
    algorithm, grid, segment = next(iter(comm.tuning.chosen.values()))
    return algorithm, grid, default if segment is None else segment


def run(args, mpi_comm=MPI.COMM_WORLD):
    model = make_model(args.model, seed=mpi_comm.rank)
    rank = mpi_comm.rank
    default = config.current()['segment_bytes']
    # What a training job has paid before its first gradient call (the fused update
    # kernels load numba; the shared-memory copies use it too): loading numba and its
    # thread pool, 0.4-0.5 s here, would otherwise fall on whichever candidate runs first.
    intra = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED)
    R, nodes = intra.size, mpi_comm.size // intra.size
    intra.Free()
    warm = create_variant('shm', mpi_comm, grid=(R, nodes))
    warm.mean_array(numpy.ones(1 << 16, dtype=numpy.float32))
    warm.finalize()
    # 1. predicted
    t0 = time.perf_counter()
    predicted = _auto.AutoCommunicator(mpi_comm, network=args.network, tune='off')
    predicted.mean_grad_in_slot(model, True)
    predicted_s = mpi_comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    pkey = _chosen(predicted, default)
    predicted_why = predicted.tuning.log[-1][1][0].get('source', 'planner')
    predicted.finalize()
    # 2. tuned
    t0 = time.perf_counter()
    tuned = _auto.AutoCommunicator(mpi_comm, network=args.network, tune='again',
                                   tune_dir=args.tune_dir)
    while not tuned.tuning.tuned:
        tuned.mean_grad_in_slot(model, True)
    tuning_s = mpi_comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    figures = next(iter(tuned.tuning.tuned.values()))
    tkey = _chosen(tuned, default)
    tuned.finalize()
    # 3. the sweep, the two choices among it
    keys = _sweep_keys(nodes, R, MODEL_BYTES[args.model], [default, 1 << 20, 0])
    for k in (pkey, tkey):
        if k not in keys:
            keys.append(k)
    comms = [create_variant(k[0], mpi_comm, grid=k[1], segment_size=k[2]) for k in keys]
    for c in comms:  # buffers and windows made, first-call costs paid
        c.mean_grad_in_slot(model, True)
    times = [[] for _ in keys]
    for r in range(args.reps):
        order = list(range(len(keys)))
        order = order[r % len(order):] + order[:r % len(order)]
        for i in order:
            times[i].append(timed(mpi_comm, lambda: comms[i].mean_grad_in_slot(model, True)))
    for c in comms:
        c.finalize()
    medians = [statistics.median(t) for t in times]
    # The sweep's own noise: the best by the even calls, timed by the odd ones, against the
    # best there. A tuned choice this close to the best is as good as the sweep can tell.
    even = [statistics.median(t[0::2]) for t in times]
    odd = [statistics.median(t[1::2]) for t in times]
    self_ratio = odd[min(range(len(keys)), key=lambda i: even[i])] / min(odd)
    best = min(range(len(keys)), key=lambda i: medians[i])
    ms = {candidates.label(k): m * 1e3 for k, m in zip(keys, medians)}
    report = {
        'model': args.model, 'bytes': MODEL_BYTES[args.model],
        'ranks': mpi_comm.size, 'mpi': MPI.Get_library_version().splitlines()[0].strip(),
        'reps': args.reps, 'sweep_ms': ms, 'sweep_self_ratio': self_ratio,
        'best': candidates.label(keys[best]), 'best_ms': medians[best] * 1e3,
        'predicted': candidates.label(pkey), 'predicted_by': predicted_why,
        'predicted_ms': ms[candidates.label(pkey)],
        'predicted_ratio': ms[candidates.label(pkey)] / (medians[best] * 1e3),
        'predicting_s': predicted_s,
        'tuned': candidates.label(tkey), 'tuned_ms': ms[candidates.label(tkey)],
        'tuned_ratio': ms[candidates.label(tkey)] / (medians[best] * 1e3),
        'tuning': figures, 'tuning_wall_s': tuning_s,
        'run_seconds': args.run_seconds,
        'cost_share': None if not args.run_seconds else figures['cost_s'] / args.run_seconds,
    }
    if rank == 0:
        print(format_report(report), flush=True)
        if args.out:
            with open(args.out, 'w') as f:
                json.dump(report, f, indent=1)
    return report


def format_report(r):
    lines = ['{} ranks, {}, {} gradients, {} interleaved calls per configuration'.format(
        r['ranks'], r['mpi'], r['model'], r['reps'])]
    for name, m in sorted(r['sweep_ms'].items(), key=lambda kv: kv[1]):
        tags = [t for t, k in (('best', 'best'), ('predicted', 'predicted'), ('tuned', 'tuned'))
                if r[k] == name]
        lines.append('  {:<36} {:8.2f} ms  {:5.2f}x {}'.format(
            name, m, m / r['best_ms'], ', '.join(tags)))
    lines.append('predicted {} ({}): {:.2f}x the best; tuned {}: {:.2f}x (the sweep\'s own '
                 'best, by half its calls, is {:.2f}x on the other half); tuning {} calls, '
                 'cost {:.3f} s{}'.format(
                     r['predicted'], r['predicted_by'], r['predicted_ratio'], r['tuned'],
                     r['tuned_ratio'], r['sweep_self_ratio'], r['tuning']['calls'],
                     r['tuning']['cost_s'],
                     '' if not r['cost_share'] else ' = {:.2%} of {:g} s'.format(
                         r['cost_share'], r['run_seconds'])))
    return '\n'.join(lines)


def build_parser():
    p = argparse.ArgumentParser(prog='python -m chainermn_torus.bench.tuning',
                                description=__doc__.split('\n')[0])
    p.add_argument('--model', default='mlp', choices=sorted(GRADIENT_SETS))
    p.add_argument('--reps', type=command_line.arg_type('count'), default=9)
    command_line.add_option(p, 'network', help='as auto\'s option (default: measured)')
    command_line.add_option(p, 'tune_dir', help='where tuned auto writes its choice')
    p.add_argument('--run-seconds', type=command_line.arg_type('positive'), default=None,
                   help='the run the tuning cost is a share of')
    p.add_argument('--out', default=None, help='write the report as JSON here (rank 0)')
    return p


def main(argv=None):
    run(command_line.parse_args(build_parser(), argv))


if __name__ == '__main__':
    main()
