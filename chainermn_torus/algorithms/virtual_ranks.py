"""Virtual ranks: a job computes as V ranks whatever the number P <= V of processes.

Each of the V virtual ranks owns what a rank owns (its shard of the data, its batch, its
random state, its running statistics); a process holds a contiguous run of them and hands
the sum of their gradients to the exact sum (``fixed_point``), whose bits do not depend on
how the V terms were grouped, so neither do the job's. The spread is as even as it goes: the
first V mod P processes hold one more (V = 6 on 4 processes: 2, 2, 1, 1). Nothing here
imports MPI.
"""

from chainermn_torus.errors import ConfigError

__all__ = ['spread', 'held', 'describe', 'check']


def check(virtual, processes, source='virtual_ranks'):
    """V as an int, refused in one line where it is not a count >= P."""
    try:
        v = int(virtual)
    except (TypeError, ValueError):
        v = None
    if v is None or isinstance(virtual, bool) or v != virtual or v < 1:
        raise ConfigError(f'chainermn_torus: {source} must be a count of ranks >= 1, '
                          f'got {virtual!r}')
    if v < processes:
        raise ConfigError(f'chainermn_torus: {source} {v} is fewer than the job\'s {processes} '
                          'processes: each process holds at least one virtual rank; use '
                          f'{source} >= {processes} or fewer processes')
    return v


def spread(virtual, processes):
    """The virtual ranks of each process: a list of P ranges covering 0..V-1 in order."""
    base, extra = divmod(virtual, processes)
    out, start = [], 0
    for p in range(processes):
        n = base + (1 if p < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


def held(virtual, processes, rank):
    """The virtual ranks process ``rank`` holds."""
    return spread(virtual, processes)[rank]


def describe(virtual, processes):
    """One line for the job's start: V on P, and how they are spread."""
    counts = [len(r) for r in spread(virtual, processes)]
    if processes == 1:
        return f'{virtual} virtual ranks on 1 process'
    if virtual == processes:
        return f'{virtual} virtual ranks on {processes} processes: one each'
    more = sum(1 for c in counts if c > counts[-1])
    shape = (f'{counts[0]} each' if more == 0 else
             f'{more} hold {counts[0]}, {processes - more} hold {counts[-1]}')
    return f'{virtual} virtual ranks on {processes} processes: {shape}'
