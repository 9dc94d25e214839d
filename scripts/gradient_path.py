"""The files and functions one gradient average passes through, per communicator, counted
from a real call:

    mpiexec -n 4 python scripts/gradient_path.py [--communicators rsap rsap:message ...]
        [--from-update] [--json FILE]

On every rank a small model's gradients are averaged once to warm up (windows, buffers and
plans are made on the first call), then once more under ``sys.setprofile``. The second call's
Python calls are recorded where their code lies in this package or in ChainerMN, in the
order first reached. Rank 0 prints, for each communicator, the files, the distinct functions,
the count of calls, the *returns* (a call back into a file still on the stack below the
caller: file A calls B, which calls into A again before returning) and the *re-entries* (a
call into a file the sequence of calls had entered and left before, however it got back:
an orchestrating file calling its helpers in turn re-enters itself each time). That is the
figure "files on a gradient's path" of docs/development.md. ``--from-update``: from the
multi-node optimizer's ``update()`` (its gradients set, no forward) instead of the
communicator's call.
"""
import argparse
import json
import os
import sys
import threading

import chainermn_torus  # NOQA: F401 (registers the communicators; Chainer after it)
import chainer
import chainer.links as L
import chainermn
import numpy

ROOTS = {os.path.dirname(os.path.abspath(chainermn_torus.__file__)): 'chainermn_torus',
         os.path.dirname(os.path.abspath(chainermn.__file__)): 'chainermn'}


def _where(filename):
    path = os.path.abspath(filename)
    for root, name in ROOTS.items():
        if path.startswith(root + os.sep):
            return name + '/' + os.path.relpath(path, root)
    return None


def _model():
    model = chainer.Sequential(L.Linear(64, 300), L.Linear(300, 10))
    for p in model.params():
        p.grad = numpy.full(p.shape, 1.0, p.dtype)
    return model


def trace(spec, from_update=False):
    """``spec``: a communicator's name, or NAME:message for rsaa/rsap with shm=False (the
    row phases as messages, not in node shared memory)."""
    name, _, how = spec.partition(':')
    comm = chainermn.create_communicator(name, **({'shm': False} if how == 'message' else {}))
    model = _model()
    if from_update:
        opt = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(), comm)
        opt.setup(model)
        opt.update()  # the first: rank 0's parameters broadcast
        for p in model.params():
            p.grad = numpy.full(p.shape, 1.0, p.dtype)
        opt.update()  # buffers and plans made

        def call():
            for p in model.params():
                p.grad = numpy.full(p.shape, 1.0, p.dtype)
            opt.update()
    else:
        def call():
            comm.multi_node_mean_grad(model)
        call()
    files, functions, calls, order, returns = [], [], [0], [], [0]
    seen_files, seen_functions = set(), set()

    def profile(frame, event, arg):
        if event != 'call':
            return
        where = _where(frame.f_code.co_filename)
        if where is None:
            return
        calls[0] += 1
        stack, f = [], frame.f_back
        while f is not None:
            w = _where(f.f_code.co_filename)
            if w is not None:
                stack.append(w)
            f = f.f_back
        if stack and stack[0] != where and where in stack[1:]:
            returns[0] += 1  # back into a file below the caller on the stack
        if not order or order[-1] != where:
            order.append(where)
        if where not in seen_files:
            seen_files.add(where)
            files.append(where)
        fn = f'{where}:{frame.f_code.co_name}'
        if fn not in seen_functions:
            seen_functions.add(fn)
            functions.append(fn)

    comm.mpi_comm.Barrier()
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    reentries = sum(1 for i, f in enumerate(order) if f in order[:i])
    return {'size': comm.size, 'files': files, 'functions': functions, 'calls': calls[0],
            'returns': returns[0], 'reentries': reentries,
            'from': 'update' if from_update else 'multi_node_mean_grad'}


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--communicators', nargs='+',
                   default=['rsap', 'rsap:message', 'rsaa:message', 'naive'])
    p.add_argument('--from-update', action='store_true',
                   help="from the multi-node optimizer's update(), not the communicator's call")
    p.add_argument('--json', default=None)
    args = p.parse_args()
    out = {name: trace(name, args.from_update) for name in args.communicators}
    from mpi4py import MPI
    if MPI.COMM_WORLD.rank == 0:
        for name, r in out.items():
            print('{}: {} files, {} functions, {} calls, {} returns, {} re-entries on P = {}'
                  .format(name, len(r['files']), len(r['functions']), r['calls'],
                          r['returns'], r['reentries'], r['size']))
            for f in r['files']:
                print('  ' + f)
        if args.json:
            with open(args.json, 'w') as f:
                json.dump(out, f, indent=1)


if __name__ == '__main__':
    main()
