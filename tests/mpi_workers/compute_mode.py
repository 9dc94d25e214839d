"""An unchanged Chainer/ChainerMN script with a convolution: prints which implementation
Chainer's convolution runs and the OpenMP threads oneDNN would use."""
import chainer.functions as F
import chainermn
import numpy
from chainer.functions.connection import convolution_2d
from threadpoolctl import threadpool_info

comm = chainermn.create_communicator('naive')
x = numpy.random.RandomState(comm.rank).rand(2, 3, 9, 9).astype(numpy.float32)
W = numpy.random.RandomState(9).rand(4, 3, 3, 3).astype(numpy.float32)
y = F.convolution_2d(x, W, pad=1)
where = convolution_2d.Convolution2DFunction.forward_cpu.__module__
gomp = sorted({i['num_threads'] for i in threadpool_info() if 'gomp' in i['filepath']})
print(f'OK rank {comm.rank} conv {where} sum {float(y.array.sum()):.4f} gomp {gomp}', flush=True)
