"""The declared interface of this package's communicators: ChainerMN's API in front of the
torus engine (``engine.TorusEngine``).

``Communicator`` is ChainerMN's MPI communicator base with what the optimizer, the launcher,
the tuner and the watchdog may ask of ours on top: the capabilities (``capabilities.OURS``
unless a class declares less) and the methods they name, each handed to the engine the
class made (``engine``). pure_allreduce, rsaa and rsap are one level below it: each resolves
its options into the engine's strategies in its constructor and nothing else. ``auto``, which
runs whichever of them it chose, has no engine and hands each call to its choice instead; a
plugin's class may do either (docs/development.md, "Adding a communicator").

Shared here, once: the options every one of ours takes (``segment_size``,
``allreduce_grad_dtype``, ``exact_sum``, ChainerMN's ``set_config``/``get_config`` of the
dtype), how its
collectives are waited for (``progress``), the parameter broadcast, ``clone`` and ``split``.
A communicator only constructs: the process is configured by the factory (``process_setup``).
"""
import inspect
from typing import Any, Callable, Optional, Sequence

from chainermn.communicators import mpi_communicator_base
from mpi4py import MPI

from chainermn_torus import config
from chainermn_torus.algorithms import variants, virtual_ranks as _virtual
from chainermn_torus.communicators import _dtypes, _packing, capabilities as _capabilities
from chainermn_torus.communicators._grid import Grid
from chainermn_torus.communicators._progress import BLOCKING, Progress
from chainermn_torus.communicators.engine import TorusEngine
from chainermn_torus.errors import ConfigError

__all__ = ['Communicator', 'CLONE_PURPOSE']

# A clone's node-shared buffers come on top of the main communicator's: a refusal has to
# say so, or the need looks like what the job already allocated once.
CLONE_PURPOSE = (' of the background thread\'s copy of the communicator (double buffering or '
                 'overlap: a second set beside the main communicator\'s, and double buffering '
                 'keeps two, one per step in flight, so the job needs up to three times one '
                 'set)')


class Communicator(mpi_communicator_base.MpiCommunicatorBase):
    """One of this package's communicators.

    Args:
        mpi_comm: mpi4py communicator (default COMM_WORLD).
        segment_size: bytes per communication segment; 0 sends the whole buffer at once.
            Default from ``CHAINERMN_TORUS_SEGMENT_BYTES`` or 4 MiB.
        allreduce_grad_dtype: the dtype gradients travel and are summed in (as ChainerMN's
            pure_nccl spells it): None (float32, float64 for float64 models), numpy.float16,
            'bfloat16' (or ml_dtypes.bfloat16), float32, float64.
        settings: the process's settings (``process_setup.init`` hands them down); None:
            the table's defaults.
        exact_sum: the exact, order-independent sum (``_exact``): gradients travel as 64-bit
            integers, and the means' bits do not depend on P, the grid or the algorithm.
            Default from ``CHAINERMN_TORUS_EXACT_SUM`` (the launcher's ``--exact-sum``) or off.
        virtual_ranks: V >= P: the sum has V terms, of which this process holds ``held``
            (``algorithms.virtual_ranks``) and hands them to ``mean_grad_sets``; implies
            ``exact_sum``. None: one a process.
        progress: how collectives are waited for (``_progress.Progress``; default blocking).
        background: made for the optimizer's background thread (``clone``): a refusal of
            node memory says so.
    """

    name: Optional[str] = None               # the factory's name
    capabilities = _capabilities.OURS        # what callers may ask (capabilities.py)
    engine: Optional[TorusEngine] = None     # the all-reduce (``_start_engine``); auto's: none
    grid: Optional[Grid] = None              # the torus's grid (rsaa, rsap)
    grid_reason = ''                         # why the grid has its shape (``describe``)

    def __init__(self, mpi_comm: Any = None, segment_size: Optional[int] = None,
                 allreduce_grad_dtype: Any = None,
                 settings: Optional[config.Settings] = None, *, exact_sum: Any = None,
                 virtual_ranks: Any = None, progress: Optional[Progress] = None,
                 background: bool = False) -> None:
        if mpi_comm is None:
            mpi_comm = MPI.COMM_WORLD
        super().__init__(mpi_comm)  # a collective: init_ranks
        # The process's settings, handed down by the factory (process_setup.init); a class
        # made directly takes the table's defaults.
        self.settings = config.defaults() if settings is None else settings
        # What split() and clone() make again: every option the constructor was given.
        self._options = {'segment_size': segment_size,
                         'allreduce_grad_dtype': allreduce_grad_dtype, 'exact_sum': exact_sum,
                         'virtual_ranks': virtual_ranks}
        # segment_size, else the settings' (CHAINERMN_TORUS_SEGMENT_BYTES, else 4 MiB)
        self.segment_bytes = self.settings.pick('segment_bytes', segment_size,
                                                'segment_size')[0]
        with self.config_scope():  # get_config() lists it, as for ChainerMN's pure_nccl
            self.allreduce_grad_dtype = _dtypes.checked(allreduce_grad_dtype)
        self.exact_sum, self.exact_sum_source = self.settings.pick(
            'exact_sum', exact_sum, 'exact_sum')
        # V virtual ranks: the same bits on any P <= V, which only the exact sum gives
        # (virtual_ranks, else CHAINERMN_TORUS_VIRTUAL_RANKS / the launcher's --virtual-ranks)
        asked, source = self.settings.pick('virtual_ranks', virtual_ranks, 'virtual_ranks')
        self.virtual_ranks = None if asked is None else _virtual.check(asked, self.size,
                                                                       source)
        self.held = range(self.rank, self.rank + 1)
        if self.virtual_ranks is not None:
            if exact_sum is not None and not self.exact_sum:
                raise ConfigError('chainermn_torus: virtual_ranks sums exactly (its bits may not '
                                  'depend on P); leave exact_sum=False out')
            self.exact_sum, self.exact_sum_source = True, 'virtual_ranks'
            self.held = _virtual.held(self.virtual_ranks, self.size, self.rank)
        self._check_exact(self.allreduce_grad_dtype)
        self.progress = BLOCKING if progress is None else progress
        self.shm_purpose = CLONE_PURPOSE if background else ''

    def _start_engine(self, rows: Optional[Callable[[Any], Any]],
                      prescaled: bool = False) -> None:
        """Make the engine with this communicator's strategies (the constructor's last
        step): ``rows(layout)`` the row phases of a buffer on ``self.grid``."""
        exact = bool(self.exact_sum)
        self.engine = TorusEngine(self.mpi_comm, self.grid, rows,
                                  None if exact else self.allreduce_grad_dtype,
                                  self.segment_bytes, prescaled, self.progress, self.name or '',
                                  exact=exact, terms=self.virtual_ranks)

    def _check_exact(self, dtype: Any) -> None:
        """The exact sum adds 64-bit integers (the gradients' own floats, integers and the
        means travel): a half dtype on the wire is refused with it (float32 and float64 are
        accepted and mean nothing then)."""
        if self.exact_sum and _dtypes.is_half(dtype):
            raise ConfigError(
                f'chainermn_torus: exact_sum ({self.exact_sum_source}) sums gradients as 64-bit '
                f'integers, so allreduce_grad_dtype {dtype.name} cannot apply: leave one of '
                'them out')

    def _engine(self) -> TorusEngine:
        if self.engine is None:
            raise RuntimeError(
                f'chainermn_torus: {type(self).__name__} made no engine: a communicator class '
                'calls self._start_engine(rows) in its constructor, or overrides the calls it '
                'answers (mean_grad_in_slot, mean_grads_by_bucket, mean_array, timings, calls), '
                'as auto does')
        return self.engine

    @property
    def calls(self) -> int:
        """Gradient calls made so far."""
        return self._engine().calls

    @property
    def uses_grid(self) -> bool:
        """Whether it takes grid=(M, N): its registration says (``algorithms.variants``)."""
        return variants.takes_grid(self.name)

    # --- what the optimizer, the launcher and the tuner ask: the engine's ---------------------
    def mean_grad_in_slot(self, model: Any, zero_fill: bool = False, slot: int = 0) -> None:
        """``multi_node_mean_grad`` into buffer ``slot`` (double buffering uses 0 and 1):
        gradients left as views of one slot stay valid while the other is in use."""
        self._one_set_a_process('multi_node_mean_grad')
        self._engine().mean_grad_in_slot(model, zero_fill, slot)

    def _one_set_a_process(self, call: str) -> None:
        """Refuse a call that hands one gradient set a process where a process may hold
        several virtual ranks (the same on every rank: none is left in a collective)."""
        if self.virtual_ranks in (None, self.size):
            return
        most = len(_virtual.held(self.virtual_ranks, self.size, 0))
        raise ConfigError(
            f'chainermn_torus: {self.virtual_ranks} virtual ranks on {self.size} processes: a '
            f'process holds up to {most} of them, whose gradients come through '
            f'mean_grad_sets(model, more), not the one set of {call}')

    def mean_grad_sets(self, model: Any, more: Sequence[Any], zero_fill: bool = False) -> None:
        """The exact mean over the job's virtual ranks: the model's gradients are those of
        this process's first virtual rank (``held[0]``), ``more`` those of the others it holds,
        each a sequence of arrays (None: zeros) in the order of the gradients taking part
        (ChainerMN's sorted ``namedparams`` that have data, and a gradient unless
        ``zero_fill``). Afterwards the model's gradients are the means."""
        if len(more) != len(self.held) - 1:
            raise ValueError(
                f'chainermn_torus: rank {self.rank} holds virtual ranks {list(self.held)} and was '
                f'handed {1 + len(more)} gradient sets (the model\'s and {len(more)} more)')
        self._engine().mean_grad_in_slot(model, zero_fill, 0, more)

    def mean_grads_by_bucket(self, named: Sequence[Any], bounds: Sequence[int],
                             ready: Callable[[int], None]) -> Any:
        """Average ``named``'s gradients bucket by bucket as ``ready(b)`` says they are set
        (``overlap=True``); returns the buffer holding the means."""
        self._one_set_a_process('overlap\'s buckets')
        return self._engine().mean_grads_by_bucket(named, bounds, ready)

    def mean_array(self, array: Any) -> Any:
        """Average a flat float array across ranks in place (benchmarks, tests)."""
        self._one_set_a_process('mean_array')
        return self._engine().mean_array(array)

    def clone(self, poll_interval: Optional[float] = None) -> 'Communicator':
        """The same communicator (grid and options) on a duplicate of its MPI communicator,
        for a background thread: collectives on the clone never match the original's. With
        ``poll_interval`` (seconds) it waits for its collectives by polling instead of
        spinning (``_progress``)."""
        opts = self.remade_options()
        if 'grid' in opts and self.grid is not None:  # the shape chosen, not chosen again
            opts['grid'] = self.grid.shape
        return type(self)(mpi_comm=self.mpi_comm.Dup(), progress=Progress(poll_interval),
                          background=True, **opts)

    @property
    def timings(self) -> dict:
        """Seconds spent so far in each part of the gradient calls (check, pack,
        communicate, unpack, total); a part not timed yet reads 0."""
        return self._engine().timings

    def describe(self) -> str:
        """One line: the algorithm, its shape and options, for the launcher's report."""
        grid = '' if self.grid is None else (f', grid (M, N) = {self.grid.shape} '
                                             f'[{self.grid_reason}]')
        sent = self.allreduce_grad_dtype
        dtype = '' if sent is None else f', gradients sent as {sent.name}'
        if self.exact_sum:
            dtype = ', exact sum (gradients summed as 64-bit integers)'
        if self.virtual_ranks is not None:
            dtype += ', ' + _virtual.describe(self.virtual_ranks, self.size)
        return '{} on P = {}{}, segment {} bytes{}{}'.format(
            self.name, self.size, grid, self.segment_bytes or 'whole buffer', dtype,
            self._describe_variant())

    def _describe_variant(self) -> str:
        return ''

    def finalize(self) -> None:
        """Free the engine's buffers and the grid's communicators (collective)."""
        if self.engine is not None:
            self.engine.free()
        if self.grid is not None:
            self.grid.free()
            self.grid = None
        super().finalize()

    # --- ChainerMN API, once for all of ours ---------------------------------------------
    def set_config(self, name: str, value: Any = True, **kwargs: Any) -> None:
        """ChainerMN's configuration: 'batched_copy' (accepted; it selects a GPU packing path
        in ChainerMN and means nothing here) and 'allreduce_grad_dtype' (as the option of
        the same name, and as ChainerMN's pure_nccl takes it); any other name raises
        ChainerMN's ValueError."""
        if name != 'allreduce_grad_dtype':
            return super().set_config(name, value, **kwargs)
        dtype = _dtypes.checked(value)
        self._check_exact(dtype)
        with self.config_scope():
            self.allreduce_grad_dtype = dtype
        self._options['allreduce_grad_dtype'] = value  # split() and clone() carry it
        self._grad_dtype_changed()

    def _grad_dtype_changed(self) -> None:
        """Called after ``set_config('allreduce_grad_dtype', ...)``: the engine for the new
        dtype (the same strategies; the old buffers are evicted collectively later)."""
        if self.engine is not None:
            self.engine = self.engine.successor(self.allreduce_grad_dtype)

    def get_config(self, name: Optional[str] = None) -> Any:
        if name == 'allreduce_grad_dtype':
            return self.allreduce_grad_dtype
        return super().get_config(name)

    def multi_node_mean_grad(self, model: Any, zero_fill: bool = False) -> None:
        """Average gradients over ranks, with ChainerMN's zero_fill semantics.

        Afterwards each gradient whose dtype is the transfer dtype is a view of this
        communicator's persistent buffer (no copy back); it stays valid until the next call
        with a model of the same layout.
        """
        self.mean_grad_in_slot(model, zero_fill, 0)  # auto's is its own

    def bcast_data(self, model: Any) -> None:
        """Broadcast all parameters from rank 0 in one message (raw bytes, exact for any
        dtype)."""
        named = _packing.data_params(model)
        # Checked by names, shapes and dtypes (what a user can compare), sent as bytes.
        _packing.check_same_layout(self.mpi_comm, _packing.Layout(
            [(n, p.data.shape, p.data.dtype) for n, p in named]), what='parameters')
        layout = _packing.Layout.of_data_bytes(named)
        if layout.size == 0:
            return
        buf = _packing.PackedBuffer(layout)  # used once per training run: not kept
        if self.rank == 0:
            buf.pack_data_bytes(named)
        self.mpi_comm.Bcast([buf.array, MPI.BYTE], root=0)
        if self.rank != 0:
            buf.unpack_data_bytes(named)

    def split(self, color: int, key: int) -> 'Communicator':
        """The same kind of communicator, with the same options, on ``MPI_Comm_split``'s
        result (a grid falls back to the new size's default)."""
        opts = self.remade_options()
        opts.pop('grid', None)
        return type(self)(mpi_comm=self.mpi_comm.Split(color, key), **opts)

    def remade_options(self) -> dict:
        """What ``split`` and ``clone`` make this class again with: every option the
        constructor was given, and the settings handed to it where the class takes them (a
        plugin's subclass may not)."""
        opts = dict(self._options)
        if 'settings' in inspect.signature(type(self).__init__).parameters:
            opts['settings'] = self.settings
        return opts
