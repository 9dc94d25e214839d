"""The collectives every algorithm is built from, as calls and as alpha-beta costs.

A *call* (``Call``) is one MPI call a communicator makes, with its group of ranks and the
bytes it passes; ``reduce_calls`` gives the calls of one sum as a buffer's reducer makes
them (MPI's sum, or float16's all-to-all + float32 adds, ``communicators._half``).

The *costs* model two levels, intra-node and inter-node, with nodes whose network
interface is shared by the ranks on them (``Group``); ranks are placed node by node (rank
r on node r // R) and grid rows are runs of M consecutive ranks. MPICH's choices for large
messages: all-reduce by Rabenseifner (2 log2 p steps, 2 (p-1)/p n bytes, (p-1)/p n
reduced), reduce-scatter by pairwise exchange (p - 1 steps, (p-1)/p n bytes and sums),
all-gather by a ring (p - 1 steps, (p-1)/p n bytes).

The network figures ``net`` are read by attribute (alpha_inter, beta_inter, alpha_intra,
beta_intra, beta_put, gamma, mem: ``planning.planner.Network``).
"""
import collections

__all__ = ['Call', 'ceil_log2', 'reduce_calls', 'side_by_side', 'exact_scatter_calls',
           'exact_column_calls', 'tail_calls', 'Group', 'allreduce_cost',
           'reduce_scatter_cost', 'allgather_cost', 'row_and_column']

# op: 'reduce_scatter' | 'allreduce' | 'allgather' | 'alltoall' | 'barrier' (MPI calls on
# ``group``), 'put' (group = (origin, target)), 'fence' (MPI_Win_fence over group, kind
# 'open' or 'close': the latter ends a round of puts), 'flush' (MPI_Win_flush of the origin
# to the target), 'notify' (a zero-byte message, group = (origin, target)), 'compute'
# (local work on each rank of group: kind 'reduce' = sums read two arrays and write one,
# 'copy' = memory traffic).
# nbytes: the call's buffer (a reduce-scatter's or all-gather's whole buffer, an
# all-to-all's send buffer), as the communicator passes it.
Call = collections.namedtuple('Call', 'op group nbytes kind')
Call.__new__.__defaults__ = (None,)


def ceil_log2(p):
    """Steps of a doubling over p ranks (a barrier, a recursive doubling): ceil(log2 p)."""
    return (p - 1).bit_length() if p > 1 else 0


# --- calls ----------------------------------------------------------------------------------
def reduce_calls(op, group, elems, itemsize):
    """A reducer's calls (``engine.MpiSum`` or ``_half.HalfReducer``) for one group."""
    p = len(group)
    if itemsize != 2:
        if op == 'allreduce' and p == 1:
            return []
        return [Call(op, group, elems * itemsize)]
    # float16: moved by MPI, summed by numba; the tail of an all-reduce in float32.
    if p == 1:
        return []
    if op == 'reduce_scatter':
        c = elems // p
        return [Call('alltoall', group, p * c * 2), Call('compute', group, p * c * 2, 'reduce')]
    if op == 'sum_small':
        return [Call('allreduce', group, elems * 4)]
    main = elems - elems % p
    calls = []
    if main:
        calls += reduce_calls('reduce_scatter', group, main, 2)
        calls.append(Call('allgather', group, main * 2))
    if main < elems:
        calls.append(Call('allreduce', group, (elems - main) * 4))
    return calls


def side_by_side(per_group):
    """The calls of groups that work at the same time (a phase's rows or columns), in the
    order that lets their i-th calls run side by side: every group's first call, then every
    group's second (``simulation.schedules.rounds_of_calls`` runs consecutive calls of one
    kind on disjoint groups at once, and a group's calls one after the other)."""
    return [call for step in zip(*per_group) for call in step]


def exact_scatter_calls(group, elems, itemsize):
    """The exact sum's reduce-scatter by messages (``communicators._exact_scatter``, one term
    a process): the blocks as the gradients' floats by MPI_Alltoallv, each receiver encoding
    its peers' blocks and its own values and adding them as integers."""
    if len(group) == 1:
        return []
    return [Call('alltoall', group, elems * itemsize),
            Call('compute', group, elems * itemsize, 'reduce')]


def exact_column_calls(group, elems, itemsize):
    """The exact sum's phase 2 where phase 3 moves the means (``_exact.column_means``): the
    integers reduce-scattered over the column, each part decoded, the means all-gathered;
    the last fewer than N elements all-reduced as integers."""
    p = len(group)
    if p == 1:
        return []
    sub = elems // p
    main = sub * p
    calls = []
    if sub:
        calls += [Call('reduce_scatter', group, main * 8),
                  Call('allgather', group, main * itemsize)]
    if main < elems:
        calls.append(Call('allreduce', group, (elems - main) * 8))
    return calls


def tail_calls(setup, tail):
    """The tail of a grid segment (fewer than M elements): one small sum over all ranks,
    then the division (the tail of ``communicators.rsaa``'s segment)."""
    P = tuple(range(setup.P))
    op = 'sum_small' if setup.itemsize == 2 else 'allreduce'
    return (reduce_calls(op, P, tail, setup.reduce_itemsize)
            + [Call('compute', P, tail * setup.itemsize, 'copy')])  # divide_by_size


# --- costs ----------------------------------------------------------------------------------
class Group:
    """p ranks of which c share a node with each member; k ranks per node active at once.

    For a phase on such a group, the fraction of traffic that leaves the node is
    (p - c) / (p - 1)."""

    def __init__(self, p, c, k):
        self.p, self.c, self.k = p, max(1, min(c, p)), k

    @property
    def off(self):
        return 0.0 if self.p <= 1 else (self.p - self.c) / float(self.p - 1)

    def alpha(self, net):
        return self.off * net.alpha_inter + (1 - self.off) * net.alpha_intra

    def beta(self, net, put=False):
        # Off-node bytes share the node's link with the k ranks sending at the same time.
        inter = net.beta_put if put else net.beta_inter
        return self.off * inter * self.k + (1 - self.off) * net.beta_intra


def allreduce_cost(g, n, net):
    p = g.p
    if p <= 1:
        return 0.0
    return (2 * ceil_log2(p) * g.alpha(net) + 2.0 * (p - 1) / p * n * g.beta(net)
            + (p - 1.0) / p * n * net.gamma)


def reduce_scatter_cost(g, n, net):
    p = g.p
    if p <= 1:
        return 0.0
    return (p - 1) * g.alpha(net) + (p - 1.0) / p * n * (g.beta(net) + net.gamma)


def allgather_cost(g, n, net):
    p = g.p
    if p <= 1:
        return 0.0
    return (p - 1) * g.alpha(net) + (p - 1.0) / p * n * g.beta(net)


def row_and_column(nodes, R, M):
    """(row group, column group) for rows of M consecutive ranks on nodes of R ranks."""
    P = nodes * R
    N = P // M
    row_c = M if (M <= R and R % M == 0) else min(M, R)
    col_c = 1 if M >= R else max(1, R // M)
    row_k = 0 if row_c == M else R  # rows inside nodes use no link
    col_k = 0 if col_c == N else R
    return Group(M, row_c, row_k), Group(N, col_c, col_k)
