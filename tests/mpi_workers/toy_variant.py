"""A toy variant added through the public seams only (docs/development.md, "Adding an
algorithm"): its description (an ``algorithms.base.Algorithm``: schedule and cost), its MPI
class (an ``interface.Communicator`` with its engine), and one registration
(``algorithms.variants.register``) that names the class and holds the variant's row.
Nothing in the package names it.

``rs_ag``: each segment's main part (a multiple of P elements) by MPI_Reduce_scatter_block
over all ranks, the division on this rank's 1/P, then an in-place MPI_Allgather; the tail
(fewer than P elements) by one small MPI_Allreduce. A flat two-step all-reduce.

Importing this module registers the variant (so the simulator's child process, which
imports a plugin's module, knows it); the MPI class lives in ``toy_communicator`` and is
imported on first use, as the package's own are. As a script it runs another program with the
variant registered: ``python toy_variant.py MODULE ARGS...`` (a package module, or a worker of this
folder by its module name; under mpiexec for MPI ones).
"""
import runpy
import sys

from chainermn_torus.algorithms import variants
from chainermn_torus.algorithms.base import Algorithm
from chainermn_torus.algorithms.collectives import (
    Call, Group, allgather_cost, reduce_calls, reduce_scatter_cost, tail_calls)

NAME = 'rs_ag'


class RsAg(Algorithm):
    node_aware = False

    def segment_calls(self, setup, elems):
        s, group = setup.itemsize, tuple(range(setup.P))
        main = elems - elems % setup.P
        calls = []
        if main and setup.P > 1:
            calls += reduce_calls('reduce_scatter', group, main, s)
            calls.append(Call('compute', group, main // setup.P * s, 'copy'))  # divide
            calls.append(Call('allgather', group, main * s))
        elif main:
            calls.append(Call('compute', group, main * s, 'copy'))
        if main < elems:
            calls += tail_calls(setup, elems - main)
        return calls

    def cost(self, nodes, R, n, net, grid):
        g = Group(nodes * R, R, R)
        rs, ag = reduce_scatter_cost(g, n, net), allgather_cost(g, n, net)
        return rs + ag, {'reduce_scatter': rs, 'allgather': ag}


_REMOVE = []


def register():
    """Add the class and the row (idempotent)."""
    if NAME in variants.COMMUNICATORS:
        return
    _REMOVE.append(variants.register(
        NAME, 'toy_communicator', 'RsAgCommunicator',
        'toy: a flat reduce-scatter and all-gather (the tests\' plugin)', grid=False,
        variants=[variants.Variant(
            NAME, NAME, {}, RsAg(), True, 'default', (2, 3),
            'toy: MPI_Reduce_scatter_block + MPI_Allgather over all ranks')]))


def unregister():
    """Take the row and the class out again (the tests' other checks see the table as
    the package has it)."""
    while _REMOVE:
        _REMOVE.pop()()


register()

if __name__ == '__main__':  # python toy_variant.py MODULE ARGS: MODULE with the toy known
    sys.argv = sys.argv[1:]
    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)
