"""``chainermn-torus calibrate`` (under mpiexec, 2+ nodes): measure the network's figures and
save them for ``plan`` and ``auto`` (the measurement is ``chainermn_torus.planning.calibrate``)."""
import argparse
import json
import os
import sys

from chainermn_torus.planning.calibrate import calibrate
from chainermn_torus.planning.planner import DEFAULT_NETWORK_FILE, Network
from chainermn_torus.runtime.files import devshm

__all__ = ['main']


def main(argv=None):
    p = argparse.ArgumentParser(prog='chainermn-torus calibrate', description=__doc__.split(
        '\n')[0])
    p.add_argument('--output', default=DEFAULT_NETWORK_FILE,
                   help='where to save the figures (default %(default)s)')
    p.add_argument('--bytes', type=int, default=16 << 20, help='large message size')
    p.add_argument('--reps', type=int, default=9)
    p.add_argument('--timeout', type=float, default=20.0,
                   help='seconds to wait for a peer before giving up')
    p.add_argument('--name', default=None)
    args = p.parse_args(argv)
    if args.bytes < 1024 or args.reps < 1 or args.timeout <= 0:
        p.error('--bytes must be >= 1024, --reps >= 1, --timeout > 0')
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if comm.rank == 0:
        try:
            os.makedirs(out_dir, exist_ok=True)
            if not os.access(out_dir, os.W_OK):
                raise OSError('not writable')
        except OSError as e:
            sys.stderr.write(f'chainermn-torus calibrate: cannot write {args.output} ({e})\n')
            _abort(comm, 2)
    try:
        data = calibrate(comm, args.bytes, args.reps, args.timeout, args.name)
    except RuntimeError as e:
        sys.stderr.write(f'{e}\n')
        sys.stderr.flush()
        _abort(comm, 3)
    if comm.rank == 0:
        with open(args.output, 'w') as f:
            json.dump(data, f, indent=2)
        print(Network.from_dict(data).describe())
        print('saved to ' + args.output)
    return 0


def _abort(comm, code):
    devshm.unlink_mpi_segments()  # MPI_Abort skips MPI_Finalize, which would remove it
    comm.Abort(code)


if __name__ == '__main__':
    sys.exit(main())
