"""pure_allreduce: one MPI_Allreduce of each segment over all P ranks, then the division.

The cost is modelled twice: over all P ranks as one flat group (``FlatAllreduce``), and as
the node-aware composition MPICH runs by default on a communicator spanning nodes with
several ranks on each (reduce in the node, all-reduce among one rank per node, broadcast in
the node: ``NodeAwareAllreduce``). The calls are the same; the simulator expands the
library's all-reduce flat or node-aware accordingly.
"""
from chainermn_torus.algorithms.base import Algorithm
from chainermn_torus.algorithms.collectives import (
    Group, allreduce_cost, ceil_log2, reduce_calls)

__all__ = ['FlatAllreduce', 'NodeAwareAllreduce']


class FlatAllreduce(Algorithm):
    node_aware = False

    def segment_calls(self, setup, elems):
        return reduce_calls('allreduce', tuple(range(setup.P)), elems, setup.reduce_itemsize)

    def cost(self, nodes, R, n, net, grid):
        t = allreduce_cost(Group(nodes * R, R, R), n, net)
        return t, {'allreduce': t}


class NodeAwareAllreduce(FlatAllreduce):
    node_aware = True

    def cost(self, nodes, R, n, net, grid):
        reduce = (ceil_log2(R) * net.alpha_intra + n * (net.beta_intra + net.gamma)
                  if R > 1 else 0.0)
        inter = allreduce_cost(Group(nodes, 1, 1), n, net)
        bcast = (ceil_log2(R) * net.alpha_intra + n * net.beta_intra) if R > 1 else 0.0
        return reduce + inter + bcast, {'node reduce': reduce, 'allreduce': inter,
                                        'node bcast': bcast}
