"""The GPU calls of Chainer's and ChainerMN's API a script may make: what each becomes under
``--gpu-to-cpu``, or why it is refused. The one table the mapping's lines, the refusals and
the listing of a script's GPU calls (``--gpu-calls``) read; and ``Said``, which says each
mapping once on rank 0.
"""
import collections

from chainermn_torus.errors import Unsupported
from chainermn_torus.launch.lines import say

__all__ = ['MAPPED', 'REFUSED', 'GPU_COMMUNICATORS', 'CUDA_KERNELS', 'CUPY_KERNELS',
           'MULTI_GPU_UPDATERS', 'Said', 'OPTION']

OPTION = '--gpu-to-cpu (CHAINERMN_TORUS_GPU_TO_CPU=1)'

_CUDA_DEVICE = "cuda.DummyDevice, Chainer's CPU device of its cuda API: use() does nothing"
_CPU = "'@numpy', the rank's CPU: arrays stay numpy"
_NUMPY = 'numpy (asnumpy: numpy.asarray; a name numpy lacks is refused)'

_SCRIPTS = ("in the script's modules (its directory's, and those of "
            'CHAINERMN_TORUS_GPU_TO_CPU_PATHS); every other module sees a CPU node')

# name as a script writes it -> what it becomes. A device request is the CPU wherever it is
# made (the node has no GPU); what the script reads of CUDA and CuPy is bound into its own
# modules at import.
MAPPED = collections.OrderedDict([
    ('chainer.cuda.available', 'True ' + _SCRIPTS),
    ('chainer.cuda.check_cuda_available', 'nothing to check'),
    ('chainer.cuda.get_device_from_id', _CUDA_DEVICE),
    ('chainer.cuda.get_device', _CUDA_DEVICE),
    ('chainer.cuda.Device', _CUDA_DEVICE),
    ('chainer.cuda.to_gpu', 'the array as it is (numpy)'),
    ('chainer.cuda.cupy', _NUMPY),
    ('import cupy', _NUMPY + ', ' + _SCRIPTS),
    ('chainer.get_device', _CPU),
    ('Link.to_gpu', _CPU),
    ('chainermn.create_communicator', "the launcher's communicator (--communicator), else "
                                      'auto'),
])

_KERNEL = ('a raw CUDA kernel: it has no CPU equivalent; compute it with numpy or '
           'chainer.functions (a FunctionNode\'s forward_cpu) for CPU nodes')
_NCCL = ('NCCL used directly (GPU-to-GPU communication): on CPU nodes use the '
         "communicator's methods (allreduce, bcast_data, multi_node_mean_grad)")

_MULTI_GPU = ('one process driving several GPUs (a model copy and a share of each batch per '
              'GPU), and this node has none: on CPU nodes each MPI rank is one replica; train '
              "with a StandardUpdater and ChainerMN's multi-node optimizer, or run a plain "
              'script with --data-parallel')

# The raw-kernel makers of Chainer's cuda module and of CuPy; the updaters of several GPUs
CUDA_KERNELS = ('elementwise', 'reduce', 'raw')
CUPY_KERNELS = ('ElementwiseKernel', 'ReductionKernel', 'RawKernel', 'RawModule')
MULTI_GPU_UPDATERS = ('ParallelUpdater', 'MultiprocessParallelUpdater')

# name -> why it cannot run on a CPU; 'cupy.*': any other name numpy does not have
REFUSED = collections.OrderedDict(
    [('chainer.cuda.' + k, _KERNEL) for k in CUDA_KERNELS]
    + [('cupy.' + k, _KERNEL) for k in CUPY_KERNELS]
    + [('cupy.cuda.nccl', _NCCL), ('chainermn.nccl', _NCCL)]
    + [('chainer.training.updaters.' + k, _MULTI_GPU) for k in MULTI_GPU_UPDATERS]
    + [('cupy.*', 'a CuPy-only name, which numpy does not have: write that step with numpy')])

# ChainerMN's communicators that need GPUs: Chainer 7.8.1's, and the older three it removed
GPU_COMMUNICATORS = ('pure_nccl', 'flat', 'non_cuda_aware', 'hierarchical', 'two_dimensional',
                     'single_node')


class Said:
    """What a launch mapped (said once per name on rank 0), and the refusals. The line a
    mapping names is looked for (a walk up the stack) only the first time it is said."""

    def __init__(self, scope, mapping, rank):
        self.scope, self.mapping, self.rank = scope, mapping, rank
        self.names = []       # the mapped names, first use first

    def mapped(self, name, frame=None, shown=None):
        """Say once that ``name`` was mapped, naming ``frame``'s line (default: the innermost
        frame that is not a library's)."""
        if name in self.names:
            return
        if frame is None:
            frame = self.scope.asker(1)[1]
        self.names.append(name)
        say(f'--gpu-to-cpu: {shown or name} ({self.scope.where(frame)}) '
            f'-> {MAPPED[name]}', self.rank)

    def request(self, name, shown):
        """For a GPU device request, wherever it is made: mapped (said once) with the
        option; without it, refused in one line naming the option."""
        if not self.mapping:
            raise Unsupported(
                f'{self.scope.where(self.scope.asker(1)[1])}: {shown} asks for a GPU: the script '
                'is written for GPUs and this node has '
                f"none; run it with {OPTION} and its GPU calls run on each rank's CPU (--gpu-calls "
                'lists them)')
        self.mapped(name, shown=shown)
        return True

    def refuse(self, name, shown, frame=None):
        if frame is None:
            frame = self.scope.asker(1)[1]
        why = REFUSED[name if name in REFUSED else 'cupy.*']
        raise Unsupported('{}{} uses {}, {}'.format(
            '--gpu-to-cpu: ' if self.mapping else '', self.scope.where(frame), shown, why))
