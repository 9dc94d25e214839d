"""The seam every algorithm family fills: its calls for one segment and its cost."""

__all__ = ['Algorithm']


class Algorithm:
    """What one algorithm does, without MPI.

    node_aware:  the simulator plays MPI's own all-reduce on a group spanning nodes as MPICH
                 runs it (reduce in the node, all-reduce among nodes, broadcast), the
                 default of the library; False: as one flat group;
    row_of_one:  this is the variant plans list for M = 1 (a row of one is a plain column
                 all-reduce, the same for every grid variant: listed once).
    """

    node_aware = True
    row_of_one = False

    def segment_calls(self, setup, elems):
        """Every rank's MPI calls for one segment of ``elems`` elements, in program order
        (``collectives.Call``; calls that different groups make at the same step, such as
        every row's reduce-scatter, one after another)."""
        raise NotImplementedError

    def end_calls(self, setup):
        """Calls once per all-reduce call, after the last segment."""
        return []

    def cost(self, nodes, R, n, net, grid):
        """(seconds, {phase: seconds}) of one all-reduce of ``n`` bytes on ``nodes`` nodes
        of ``R`` ranks, grid (M, N) or None."""
        raise NotImplementedError

    def check_placement(self, M, R):
        """Raise ValueError where rows of M cannot run on nodes of R ranks."""
