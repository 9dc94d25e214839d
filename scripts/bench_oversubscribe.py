"""The MPI's own oversubscription setting (chainermn_torus/tools/oversubscribe.py), on and
off, on an oversubscribed P = 6 job of this machine: the exact-mean check
(tests/mpi_workers/check_mean.py) and MNIST training (examples/mnist), repeats interleaved.

    scripts/with_mpi.sh MPI .venv/bin/python scripts/bench_oversubscribe.py --json OUT [--repeats 3]

Prints and writes the wall time of each job (median of the repeats) and the ratio on/off.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from chainermn_torus import config
from chainermn_torus.tools import oversubscribe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS = {
    'exact mean (rsap, rsaa)': [os.path.join(ROOT, 'tests', 'mpi_workers', 'check_mean.py'),
                                'rsap', 'rsaa'],
    'MNIST training (rsap, 1 epoch of 6,000)': [
        os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py'), '--communicator', 'rsap',
        '--epoch', '1', '--limit', '6000', '--out', os.path.join(tempfile.gettempdir(),
                                                                 'bench-oversubscribe')],
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--ranks', type=int, default=6)
    p.add_argument('--repeats', type=int, default=3)
    p.add_argument('--json')
    args = p.parse_args()
    mpi = config.current()['mpi']
    mpiexec = config.current()['mpiexec'] or os.path.join(os.path.dirname(sys.executable),
                                                       'mpiexec')
    settings = oversubscribe.environment(mpi, args.ranks)
    if not settings:
        sys.exit(f'{args.ranks} ranks on {len(os.sched_getaffinity(0))} cores are not '
                 'oversubscribed')
    base = dict(os.environ, OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1',
                CHAINERMN_TORUS_QUIET='1')
    times = {(job, on): [] for job in JOBS for on in (False, True)}
    for _ in range(args.repeats):
        for job, argv in JOBS.items():
            for on in (False, True):
                env = dict(base, **settings) if on else base
                start = time.perf_counter()
                proc = subprocess.run([mpiexec, '-n', str(args.ranks), sys.executable] + argv,
                                      env=env, capture_output=True, text=True, timeout=600)
                if proc.returncode != 0:
                    sys.exit(f'{job} failed:\n{proc.stderr[-3000:]}')
                times[(job, on)].append(time.perf_counter() - start)
    rows = []
    for job in JOBS:
        off, on = (statistics.median(times[(job, s)]) for s in (False, True))
        rows.append({'job': job, 'off_s': off, 'on_s': on, 'on_over_off': on / off,
                     'off_all': times[(job, False)], 'on_all': times[(job, True)]})
        print('{} P = {} {}: off {:.2f} s, on {:.2f} s ({}), on/off {:.2f}'.format(
            mpi, args.ranks, job, off, on, ' '.join(f'{k}={v}'
                                                  for k, v in settings.items()), on / off))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'mpi': mpi, 'ranks': args.ranks, 'cores': len(os.sched_getaffinity(0)),
                       'settings': settings, 'repeats': args.repeats, 'rows': rows}, f,
                      indent=1)


if __name__ == '__main__':
    main()
