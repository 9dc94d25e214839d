"""Run by tests/test_emulated_cluster.py inside the emulated cluster: K nodes x R ranks."""
import hashlib
import socket
import sys

import chainer
import numpy

import chainermn
import chainermn_torus  # NOQA

K, R = int(sys.argv[1]), int(sys.argv[2])


class Model(chainer.Link):
    def __init__(self, sizes):
        super(Model, self).__init__()
        with self.init_scope():
            for i, n in enumerate(sizes):
                setattr(self, 'p{}'.format(i), chainer.Parameter(numpy.zeros(n, numpy.float32)))


def main():
    comm = chainermn.create_communicator('naive')
    host = socket.gethostname()
    assert comm.size == K * R and comm.intra_size == R and comm.inter_size == K, (
        comm.size, comm.intra_size, comm.inter_size)
    assert host == 'node{}'.format(comm.inter_rank), (host, comm.inter_rank)
    sizes = [300001, 1031, 77]
    for name in ('rsap', 'rsaa', 'pure_allreduce'):
        for dtype in (None, numpy.float16):
            kw = {} if dtype is None else {'allreduce_grad_dtype': dtype}
            c = chainermn.create_communicator(name, **kw)
            if name != 'pure_allreduce':
                # Node-aware by default: rows are the ranks of one node.
                assert c.grid.shape == (R, K) and c.grid_reason == 'M = ranks per node', (
                    c.grid.shape, c.grid_reason)
                assert c.grid.row_comm.size == R
                hosts = c.grid.row_comm.allgather(host)
                assert len(set(hosts)) == 1, hosts
            model = Model(sizes)
            for i, (_, p) in enumerate(sorted(model.namedparams())):
                p.grad = numpy.random.RandomState(100 * c.rank + i).standard_normal(
                    sizes[i]).astype(numpy.float32)
            c.multi_node_mean_grad(model)
            for i, (_, p) in enumerate(sorted(model.namedparams())):
                ref = numpy.mean([numpy.random.RandomState(100 * r + i).standard_normal(
                    sizes[i]) for r in range(c.size)], axis=0)
                tol = 1e-5 if dtype is None else 4e-3
                assert numpy.abs(p.grad - ref).max() < tol, (name, dtype, i)
            digests = c.mpi_comm.allgather(hashlib.md5(b''.join(  # hash() is per process
                p.grad.tobytes() for _, p in sorted(model.namedparams()))).hexdigest())
            assert len(set(digests)) == 1, name
            c.finalize()
    print('OK rank {} {} intra {} inter {}'.format(comm.rank, host, comm.intra_rank,
                                                   comm.inter_rank), flush=True)


if __name__ == '__main__':
    main()
