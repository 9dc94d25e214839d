"""Run by tests/scripts/test_emulated_cluster.py inside the emulated cluster: K nodes x R ranks."""
import hashlib
import socket
import sys

import chainermn_torus  # noqa: F401 first: then Chainer's import scans no packages

import chainer
import numpy

import chainermn
from chainermn_torus.communicators._shm import NodeBuffers

K, R = int(sys.argv[1]), int(sys.argv[2])


class Model(chainer.Link):
    def __init__(self, sizes):
        super().__init__()
        with self.init_scope():
            for i, n in enumerate(sizes):
                setattr(self, f'p{i}', chainer.Parameter(numpy.zeros(n, numpy.float32)))


def main():
    comm = chainermn.create_communicator('naive')
    host = socket.gethostname()
    assert comm.size == K * R and comm.intra_size == R and comm.inter_size == K, (
        comm.size, comm.intra_size, comm.inter_size)
    assert host == f'node{comm.inter_rank}', (host, comm.inter_rank)
    sizes = [300001, 1031, 77]
    cases = [(n, d, {}) for n in ('rsap', 'rsaa', 'pure_allreduce')
             for d in (None, numpy.float16)]
    cases += [('rsap', None, {'shm': False}), ('rsap', None, {'sync': 'notify'}),
              ('rsap', None, {'reduce_scatter': 'accumulate'})]
    for name, dtype, opts in cases:
        kw = dict(opts) if dtype is None else dict(opts, allreduce_grad_dtype=dtype)
        if True:
            c = chainermn.create_communicator(name, **kw)
            if name != 'pure_allreduce':
                # Rows inside nodes: shared-memory row phases unless an option rules them out.
                want_shm = R > 1 and not opts
                assert c.shm == want_shm, (name, dtype, opts, c.shm)
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
            if name != 'pure_allreduce':
                # float16 keeps the message phases (no MPI sum to read peers with).
                in_shm = any(isinstance(b.memory, NodeBuffers) for b in c.engine.buffers.values())
                assert in_shm == (c.shm and dtype is None), (name, dtype, opts, in_shm)
            c.finalize()
    if R > 1:
        # A grid whose rows span nodes has no shared-memory path: asked for, it is refused.
        try:
            chainermn.create_communicator('rsap', grid=(R * K, 1), shm=True)
        except ValueError as e:
            assert 'inside one node' in str(e), e
        else:
            raise AssertionError('shm=True accepted for rows spanning nodes')
        c = chainermn.create_communicator('rsap', grid=(R * K, 1))  # default: messages
        assert c.shm is False
        c.finalize()
    print(f'OK rank {comm.rank} {host} intra {comm.intra_rank} inter {comm.inter_rank}', flush=True)


if __name__ == '__main__':
    main()
