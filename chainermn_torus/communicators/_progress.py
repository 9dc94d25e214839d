"""How a communicator waits for its collectives: blocking, or polling without spinning.

MPI implementations wait for a collective by spinning on the CPU. That is right for the
training thread, which has nothing else to do, but wrong for the double-buffering thread: it
shares the cores with the training thread (on a node where every core computes), and while it
spins on a peer that is not there yet, it takes the core from the compute it is meant to
overlap. In *polling* mode each collective is started as its non-blocking variant and
``MPI_Test``-ed every ``interval`` seconds, sleeping (and releasing the GIL) in between; MPI
progresses the operation inside each test. Measured slower than blocking on the 2-core test
machine (each step waits for the thread to wake and to get the GIL back), so it is an option
(``create_multi_node_optimizer(..., background_poll=seconds)``), not the default; see
``optimizers.update_modes.BACKGROUND_POLL_S`` for the figures.
"""
import time
from chainermn_torus.errors import ConfigError

__all__ = ['Progress', 'BLOCKING']


class Progress:

    def __init__(self, interval=None):
        if interval is not None and not interval > 0:
            raise ConfigError('chainermn_torus: the polling interval must be > 0 seconds (or '
                              f'None for blocking calls), got {interval!r}')
        self.interval = interval

    @property
    def polling(self):
        return self.interval is not None

    @property
    def direct(self):
        """Whether a caller may call mpi4py's blocking method itself (no call of ours in
        between on the hot path); a subclass that watches the calls says False."""
        return self.interval is None and type(self).__call__ is Progress.__call__

    def bind(self, comm, name):
        """``comm.<name>`` waited for in this way, bound once: mpi4py's own method where the
        wait blocks."""
        if self.direct:
            return getattr(comm, name)
        return lambda *args, **kwargs: self(comm, name, *args, **kwargs)

    def __call__(self, comm, name, *args, **kwargs):
        """comm.<name>(*args) (e.g. 'Allreduce'), or its non-blocking variant, polled."""
        if self.interval is None:
            return getattr(comm, name)(*args, **kwargs)
        # mpi4py's names: Allreduce -> Iallreduce, Reduce_scatter_block -> Ireduce_scatter_block
        self.wait(getattr(comm, 'I' + name.lower())(*args, **kwargs))

    def wait(self, request):
        if self.interval is None:
            request.Wait()
            return
        while not request.Test():
            time.sleep(self.interval)


BLOCKING = Progress()
