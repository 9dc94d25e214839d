"""Runs a training script unchanged, except that in the first step of a ``chainermn-torus
elastic`` run the ranks of emulated node ``node<N>`` stop at one chosen point and wait to be
lost (scripts/elastic_cases.py kills or freezes the node once the mark is written):

    elastic_fault.py N PHASE AT MARK -- script.py ARGS...
    elastic_fault.py N PHASE AT MARK -- -m chainermn_torus.run OPTIONS script.py ARGS...

PHASE:
* ``allreduce``: at the AT-th gradient all-reduce (a virtual-ranks job's too), on entering
  it, while the other nodes' ranks are inside it waiting;
* ``snapshot``: in the snapshot of iteration AT, on the node's writing rank, before it writes
  (the other nodes write theirs and wait);
* ``evaluation``: in the first evaluation, inside the multi-node evaluator, while the
  other nodes evaluate and then wait for its result;
* ``raise``: at the AT-th gradient all-reduce the node's ranks raise an error (the
  script's own failure: every node still answers), once the mark is written.

MARK: a file written once (its first line "FAULT <time>") when a rank of the node stops.
"""
import os
import runpy
import socket
import sys
import time

import chainermn_torus  # noqa: F401 first (Chainer imports after it on 3.12)
import chainer
import chainermn

from chainermn_torus import config
from chainermn_torus.extensions.checkpoint import in_memory


def write_mark(mark):
    try:
        fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        os.write(fd, f'FAULT {time.time():.3f} {socket.gethostname()}\n'.encode())
        os.close(fd)


def stop_here(mark):
    write_mark(mark)
    while True:  # lost with the node
        time.sleep(60)


def fail_here(mark):
    write_mark(mark)
    raise RuntimeError('elastic_fault: the script fails here (phase raise)')


def arm(phase, at, mark):
    if phase in ('allreduce', 'raise'):
        create = chainermn.create_communicator

        def created(*args, **kwargs):
            comm = create(*args, **kwargs)
            calls = [0]

            def counting(mean):
                def counted(*a, **k):
                    calls[0] += 1
                    if calls[0] == at:
                        (fail_here if phase == 'raise' else stop_here)(mark)
                    return mean(*a, **k)
                return counted
            comm.multi_node_mean_grad = counting(comm.multi_node_mean_grad)
            if hasattr(comm, 'mean_grad_sets'):   # virtual ranks: every process's step
                comm.mean_grad_sets = counting(comm.mean_grad_sets)
            return comm
        chainermn.create_communicator = created
    elif phase == 'snapshot':
        write = in_memory.MemorySnapshot._write

        def stopped(self, iteration, *args):
            if iteration == at:
                stop_here(mark)
            return write(self, iteration, *args)
        in_memory.MemorySnapshot._write = stopped
    elif phase == 'evaluation':
        evaluate = chainer.training.extensions.Evaluator.evaluate

        def stopped(self):
            stop_here(mark)
            return evaluate(self)
        chainer.training.extensions.Evaluator.evaluate = stopped
    else:
        raise SystemExit(f'elastic_fault: unknown phase {phase!r}')


def main():
    node, phase, at, mark = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    rest = sys.argv[5:]
    if rest[:1] == ['--']:
        rest = rest[1:]
    where = config.resolve()['elastic_step']  # this test script's own entry
    if where is not None and where[1] == 0 and socket.gethostname() == 'node' + node:
        arm(phase, at, mark)
    if rest[0] == '-m':  # a module: the launcher (python -m chainermn_torus.run ...)
        sys.argv = rest[1:]
        runpy.run_module(rest[1], run_name='__main__', alter_sys=True)
    else:
        sys.argv = rest
        runpy.run_path(rest[0], run_name='__main__')


if __name__ == '__main__':
    main()
