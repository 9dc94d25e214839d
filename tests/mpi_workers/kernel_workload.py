"""Run by tests/tools/test_kernel_cache.py under mpiexec -n 4: every kernel declared for compiling
ahead (runtime.cpu.jit.kernel), reached through the package's own calls: a communicator's
shared-memory rows on float32 and float64 gradients, its float16 messages and its exact sum
(float32 and float64: two virtual ranks a process, and one on a column, rows of 4 and 2), the finite
check, the fused optimizers and the large-batch RMSprop, flush-to-zero, batch normalization
(float32's and bfloat16's), ReLU and the sums on numba's kernels, the benchmark's copy.
Writes, per rank, each kernel's argument types loaded from numba's cache and those compiled here to
``PREFIX.RANK.json`` (argv[1])."""
import json
import sys

import chainermn_torus  # noqa: F401 first: then Chainer's import scans no packages

import chainer
import chainer.functions as F
import chainer.links as L
import chainermn
import numpy
from mpi4py import MPI

from chainermn_torus.compute.kernels import eltwise
from chainermn_torus.compute.onednn import batchnorm
from chainermn_torus.optimizers import fpenv, fuse, kernels, large_batch
from chainermn_torus.runtime.cpu import finite
from chainermn_torus.tools import kernel_cache


def model(dtype):
    m = chainer.Sequential(L.Linear(6, 5), L.Linear(5, 3))
    for p in m.params():
        p.array = p.array.astype(dtype)
    return m


def backward(m, dtype):
    m.cleargrads()
    x = numpy.random.RandomState(MPI.COMM_WORLD.rank).standard_normal((4, 6)).astype(dtype)
    F.sum(m(x) ** 2).backward()


# The communicators: rsap's rows in shared memory (one node) with float32 and float64
# gradients; rsaa's messages with float16 and bfloat16 (the reduce-scatter sums their blocks);
# the exact sum: two virtual ranks a process (its integers: the other held rank's set added),
# and one term a process, whose owners encode the peers' floats: on a column (2x2: the
# integers' chunk), a row of four (the terms encoded two at once, then one, then the last
# on its way to the mean) and, in pairs of ranks, a row of two (both terms and the mean in
# one pass; where the gradients are None, the peer's zeros alone on their way to the mean).
pairs = MPI.COMM_WORLD.Split(MPI.COMM_WORLD.rank // 2)
rows = {'shm': False, 'exact_sum': True}
for name, options, dtype in (('rsap', {}, numpy.float32), ('rsap', {}, numpy.float64),
                             ('rsaa', {'allreduce_grad_dtype': numpy.float16, 'shm': False},
                              numpy.float32),
                             ('rsaa', {'allreduce_grad_dtype': 'bfloat16', 'shm': False},
                              numpy.float32),
                             ('rsap', {'virtual_ranks': 8}, numpy.float32),
                             ('rsap', {'virtual_ranks': 8}, numpy.float64),
                             ('rsaa', dict(rows, grid='2x2'), numpy.float32),
                             ('rsaa', dict(rows, grid='2x2'), numpy.float64),
                             ('rsaa', dict(rows, grid='4x1'), numpy.float32),
                             ('rsaa', dict(rows, grid='4x1'), numpy.float64),
                             ('rsaa', dict(rows, grid='2x1', mpi_comm=pairs), numpy.float32),
                             ('rsaa', dict(rows, grid='2x1', mpi_comm=pairs), numpy.float64)):
    comm = chainermn.create_communicator(name, **options)
    m = model(dtype)
    backward(m, dtype)
    if 'virtual_ranks' in options:   # the exact sum, with the other held rank's set
        comm.mean_grad_sets(m, [[p.grad.copy() for _, p in sorted(m.namedparams())]])
    elif 'mpi_comm' in options:      # again without the first weight's, its chunk on rank 0
        comm.multi_node_mean_grad(m)
        sorted(m.namedparams())[0][1].grad = None
        comm.multi_node_mean_grad(m, zero_fill=True)
    else:
        comm.multi_node_mean_grad(m)
    comm.finalize()

for dtype in (numpy.float32, numpy.float64):
    assert finite.count_nonfinite(numpy.array([1, numpy.nan], dtype)) == 1

for optimizer in (chainer.optimizers.Adam(), chainer.optimizers.Adam(amsgrad=True),
                  chainer.optimizers.MomentumSGD(), chainer.optimizers.RMSprop(),
                  chainer.optimizers.RMSprop(eps_inside_sqrt=True)):
    m = model(numpy.float32)
    fused = fuse(optimizer, flush_denormals=True).setup(m)
    backward(m, numpy.float32)
    fused.update()
m = model(numpy.float32)
optimizer = large_batch.RMSpropWarmup()
optimizer.setup(m)
backward(m, numpy.float32)
optimizer.update()

fpenv.set_flush_denormals(True)
assert fpenv.flush_denormals_enabled()
fpenv.set_flush_denormals(False)

x = numpy.random.RandomState(0).standard_normal((2, 3, 4, 4)).astype(numpy.float32)
gamma, beta = numpy.ones(3, numpy.float32), numpy.zeros(3, numpy.float32)
for any_order in (False, True):  # float32's kernels, and bfloat16's sums in any order
    y, mean, var = batchnorm.forward(x, gamma, beta, 2e-5, via='numba', any_order=any_order)
    batchnorm.backward(x, numpy.ones_like(y), mean, var, gamma, 2e-5, via='numba',
                       any_order=any_order)
relu = eltwise.relu(x)
eltwise.relu_grad(relu, x)
eltwise.add([x, relu, x])  # the sums: add, then add_into

src = numpy.arange(10, dtype=numpy.float32)
dst = numpy.empty_like(src)
kernels.copy(dst, src)

stats = {}
for module, name, dispatcher in kernel_cache.kernels():
    s = dispatcher.stats
    stats[f'{module}.{name}'] = [sorted(map(str, s.cache_hits)),
                                           sorted(map(str, s.cache_misses))]
with open(f'{sys.argv[1]}.{MPI.COMM_WORLD.rank}.json', 'w') as f:
    json.dump(stats, f)
print(f'OK rank {MPI.COMM_WORLD.rank}', flush=True)
