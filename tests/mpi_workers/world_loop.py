"""One rank of a test world (tests/mpi_world.py): runs the checks it is sent until 'stop'.

``world_loop.py ADDRESS FOLDER``: connects to the harness's Unix socket ADDRESS, says hello
(rank, pid, host), then for each request ('run', module, function, args, env) imports the
module from tests/mpi_workers, calls ``function(comm, *args)`` with a fresh ``Dup`` of the
world and answers ('ok', value, output) or ('raised', traceback, output). The environment
variables of a request hold for that check only. On SIGUSR1 the rank writes its Python
stack to FOLDER/stack.RANK (the harness asks for it when the rank does not answer).
"""
import contextlib
import faulthandler
import importlib
import io
import os
import signal
import socket
import sys
import traceback
from multiprocessing.connection import Client

from chainermn_torus.process import STATE
from chainermn_torus.runtime.cpu import jit, threads

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)                   # the checks' modules
sys.path.insert(1, os.path.dirname(HERE))  # tests/: package_probes
import package_probes  # noqa: E402 (starts no MPI)


def run_check(world, module, function, args, env):
    saved = dict(os.environ)
    os.environ.update(env)
    out = io.StringIO()
    comm = world.Dup()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            value = getattr(importlib.import_module(module), function)(comm, *args)
        comm.Free()
        return ('ok', value, out.getvalue())
    except BaseException:
        # comm is not freed: the other ranks may still be in a collective on it, and the
        # harness ends this world after a failure anyway.
        return ('raised', traceback.format_exc(), out.getvalue())
    finally:
        os.environ.clear()
        os.environ.update(saved)
        package_probes.forget_said()  # lines said once per process are said again in the next check
        STATE.settings = None  # the next check resolves its own environment's


def main():
    address, folder = sys.argv[1], sys.argv[2]
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    # numba's threads as a job's budget sets them (cores / ranks on the node: one here), for
    # the checks that make communicators with create_variant, which configures nothing: a
    # team of threads in each of P ranks on 2 cores spins on the cores the others wait for
    # (record_calls at P = 6: 84 s against 2.6 s). A check that applies a budget applies its
    # own.
    numba = jit.numba()
    if numba is not None:
        node = world.Split_type(MPI.COMM_TYPE_SHARED)
        numba.set_num_threads(min(threads.default_threads(node.size)[0],
                                  numba.config.NUMBA_NUM_THREADS))
        node.Free()
    stack = open(os.path.join(folder, f'stack.{world.rank}'), 'w')
    faulthandler.register(signal.SIGUSR1, file=stack, all_threads=True)
    conn = Client(address, family='AF_UNIX')
    conn.send(('hello', world.rank, os.getpid(), socket.gethostname()))
    while True:
        # Waits in the kernel (a socket read), not in MPI: between checks a rank uses no CPU.
        request = conn.recv()
        if request[0] == 'stop':
            break
        _, module, function, args, env = request
        conn.send(run_check(world, module, function, args, env))
    conn.close()


if __name__ == '__main__':
    main()
