"""What a case does to its process: the process's state read before and after it, on every
rank, as one JSON file per rank and moment
(``$PROBE_OUT/{rank}.{when}.json``), and again after ``Setup.undo()``.

Cases: ``import`` (``import chainermn_torus``), ``naive`` (ChainerMN's own communicator),
``rsap`` (this package's), ``optimizer`` (this package's multi-node optimizer over ``naive``,
with flush-to-zero), ``launched`` (the script as ``python -m chainermn_torus.run`` runs it: the
state at its first line, against a plain run's). Read without changing what is read: no
Chainer before the package (Python 3.12 imports it only after), numba only if loaded.
"""
import faulthandler
import json
import os
import signal
import sys
import threading
import time

import numpy
import psutil
from threadpoolctl import threadpool_info

CASE = sys.argv[1]
# Every signal the process could be told (SIGKILL and SIGSTOP cannot be handled).
SIGNALS = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]


def _whose(fn):
    """'python' / 'chainer' for the original, else the module that replaced it."""
    module = getattr(fn, '__module__', None) or ''
    return module.split('.')[0] if module.startswith('chainermn_torus') else 'original'


def _malloc():
    """Whether a freed 64 MiB array's memory goes back to the kernel (glibc's default: an
    array that large has pages of its own, unmapped at its free) or is kept (mallopt)."""
    me = psutil.Process()
    a = numpy.ones(16 << 20, numpy.float32)
    held = me.memory_info().rss
    del a
    return 'returned' if held - me.memory_info().rss > (32 << 20) else 'kept'


def state():
    trainer = sys.modules.get('chainer.training')
    numba = sys.modules.get('numba')
    wakeup = signal.set_wakeup_fd(-1)  # read, and put back
    signal.set_wakeup_fd(wakeup)
    denormal = numpy.array([1e-39], numpy.float32) * numpy.float32(1.0)
    time.sleep(0.3)  # a watcher being told to leave
    return {
        'excepthook': _whose(sys.excepthook),
        'sys.exit': _whose(sys.exit),
        'signals': sorted('{}:{}'.format(int(s), _whose(signal.getsignal(s))
                                         if callable(signal.getsignal(s)) else
                                         str(signal.getsignal(s))) for s in SIGNALS),
        'wakeup fd': wakeup != -1,
        'Trainer.run': _whose(trainer.Trainer.run) if trainer else 'original',
        'children': sorted(p.name() for p in psutil.Process().children(recursive=True)
                           if p.status() != psutil.STATUS_ZOMBIE),
        'faulthandler': faulthandler.is_enabled(),
        'malloc': _malloc(),
        'threads': sorted('{}:{}'.format(i['internal_api'], i['num_threads'])
                          for i in threadpool_info()) +
        ([f'numba:{numba.get_num_threads()}'] if numba and hasattr(
            numba, 'get_num_threads') and 'numba.np.ufunc.parallel' in sys.modules else []),
        'python threads': threading.active_count(),
        'fp environment': 'flush-to-zero' if float(denormal[0]) == 0.0 else 'ieee',
        'chainer functions': _chainer_functions(),
    }


def _chainer_functions():
    if 'chainer' not in sys.modules:
        return 'original'
    from chainer.functions.connection import convolution_2d
    return _whose(convolution_2d.Convolution2DFunction.forward_cpu)


def say(when, value):
    """Into $PROBE_OUT/RANK.WHEN.json: whole, whatever the launcher does to the ranks'
    interleaved output."""
    rank = os.environ.get('PMI_RANK', os.environ.get('OMPI_COMM_WORLD_RANK', '0'))
    with open(os.path.join(os.environ['PROBE_OUT'], f'{rank}.{when}.json'),
              'w') as f:
        json.dump(value, f, sort_keys=True)


if CASE == 'launched':  # the launcher (or nothing) configured the process before this line
    say('at-start', state())
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()
    sys.exit(0)

if CASE != 'import':
    from mpi4py import MPI  # noqa: F401 MPI_Init's changes are MPI's: read after it
say('before', state())
import chainermn_torus  # noqa: E402
if CASE == 'import':
    say('after', state())
    sys.exit(0)
import chainer  # noqa: E402
import chainermn  # noqa: E402

comm = chainermn.create_communicator('rsap' if CASE == 'rsap' else 'naive')
if CASE == 'optimizer':
    chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm,
                                          flush_denormals=True)
say('after', state())
setup = getattr(chainermn_torus.process_setup, 'setup', None)  # None: a tree before init()
done = setup() if setup is not None else None
if done is not None:
    done.undo()
say('undone', state())
comm.mpi_comm.Barrier()
