#!/usr/bin/env python3
"""A remembered ``auto`` choice rewritten to the worst candidate, and the next tuned job
(issue 82): does the job check it and end near the best fixed communicator?

    mpiexec -n 2 .venv/bin/python scripts/remembered_choice.py [--model resnet50]
        [--calls 1000] [--json FILE]

In one MPI run, on the model's own gradient buffer (``bench.filled_gradients``):

1. ``auto`` with ``tune='again'`` tunes and remembers its choice in a fresh folder;
2. rank 0 rewrites that file's choice to the tuning's slowest candidate (its figures left
   as they were, as a tuning under noise leaves them);
3. the job: ``auto`` with ``tune='on'`` for ``--calls`` gradient calls, its whole time
   counted (the check of the remembered choice, the tuning again, the calls after);
4. every fixed communicator (pure_allreduce, rsaa, rsap: what ``create_communicator``
   makes by name) for as many calls; and the remembered worst choice kept without a check
   (the behaviour before), from the median of 5 of its calls times ``--calls`` (the whole
   run of a choice 30-50x slower would take most of an hour here).

Reports each one's total and the job's ratio to the best fixed one; the target is 1.15.
The job's own cost is fixed (the check, the tuning again), so the ratio falls with the job's
length: ``--calls`` is the job's length in gradient calls (one per training iteration).
"""
import argparse
import json
import os
import sys
import tempfile
import time


import chainermn_torus  # noqa: F401 (registers the factory; Chainer after it on 3.12)
from mpi4py import MPI

from chainermn_torus import auto as _auto
from chainermn_torus.bench.filled_gradients import GRADIENT_SETS, make_model
from chainermn_torus.communicators import create_variant
from chainermn_torus.tuning import candidates


def total(mpi_comm, comm, model, calls):
    mpi_comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        comm.mean_grad_in_slot(model, True)
    return mpi_comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--model', default='resnet50', choices=sorted(GRADIENT_SETS))
    p.add_argument('--calls', type=int, default=1000)
    p.add_argument('--json', default=None)
    args = p.parse_args()
    mpi_comm = MPI.COMM_WORLD
    rank = mpi_comm.rank
    model = make_model(args.model, seed=rank)
    folder = mpi_comm.bcast(tempfile.mkdtemp(prefix='remembered-') if rank == 0 else None)
    tuned = _auto.AutoCommunicator(mpi_comm, tune='again', tune_dir=folder)
    while not tuned.tuning.tuned:
        tuned.mean_grad_in_slot(model, True)
    figures = next(iter(tuned.tuning.tuned.values()))
    rows = [r for r in figures['candidates'] if r['median_ms'] is not None]
    worst = max(rows, key=lambda r: r['median_ms'])
    worst_key, = [k for k in tuned.tuning.made if candidates.label(k) == worst['candidate']]
    tuned.finalize()
    if rank == 0:
        name, = [n for n in os.listdir(folder) if n.endswith('.json')]
        path = os.path.join(folder, name)
        with open(path) as f:
            data = json.load(f)
        data['choice'] = {'algorithm': worst_key[0], 'grid': worst_key[1],
                          'segment_bytes': worst_key[2] or data['choice']['segment_bytes']}
        with open(path, 'w') as f:
            json.dump(data, f)
    mpi_comm.Barrier()
    fixed = {name: create_variant(name, mpi_comm) for name in ('pure_allreduce', 'rsaa',
                                                               'rsap')}
    stale = create_variant(worst_key[0], mpi_comm, grid=worst_key[1],
                           **({} if worst_key[2] is None else {'segment_size': worst_key[2]}))
    for c in list(fixed.values()) + [stale]:  # buffers made, first calls paid
        c.mean_grad_in_slot(model, True)
    out = {'fixed_s': {}}
    job = _auto.AutoCommunicator(mpi_comm, tune='on', tune_dir=folder)
    out['job_s'] = total(mpi_comm, job, model, args.calls)
    for name, c in fixed.items():
        out['fixed_s'][name] = total(mpi_comm, c, model, args.calls)
    few = [total(mpi_comm, stale, model, 1) for _ in range(5)]
    out['unchecked_worst_s'] = sorted(few)[2] * args.calls
    chosen = next(iter(job.tuning.chosen.values()))
    job.finalize()
    for c in list(fixed.values()) + [stale]:
        c.finalize()
    best = min(out['fixed_s'], key=out['fixed_s'].get)
    out.update({'model': args.model, 'ranks': mpi_comm.size, 'calls': args.calls,
                'worst_written': worst['candidate'], 'job_chose': candidates.label(chosen),
                'best_fixed': best, 'job_ratio': out['job_s'] / out['fixed_s'][best],
                'unchecked_ratio': out['unchecked_worst_s'] / out['fixed_s'][best],
                'target': 1.15})
    if rank == 0:
        print('remembered choice rewritten to {} (the tuning\'s slowest); the job, {} calls: '
              '{:.2f} s, {:.3f}x the best fixed ({} {:.2f} s); the worst kept unchecked: '
              '{:.3f}x; job chose {}'.format(
                  out['worst_written'], args.calls, out['job_s'], out['job_ratio'], best,
                  out['fixed_s'][best], out['unchecked_ratio'], out['job_chose']))
        if args.json:
            with open(args.json, 'w') as f:
                json.dump(out, f, indent=1)
    return 0 if out['job_ratio'] <= 1.15 else 1


if __name__ == '__main__':
    sys.exit(main())
