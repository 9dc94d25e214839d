"""What tuned ``auto`` measures: the candidates of each stage, from the planner's rows.

Stage 1 (``kinds``): one configuration of each communicator kind; stage 2
(``refinements``): the winner on other grids and with other segment sizes. A candidate is
a key (variant name, grid or None, segment bytes or None for the communicator's default);
variants that build the same communicator (pure_allreduce and its node-aware model) are
one candidate under the first name of the table.
"""
import collections

from chainermn_torus.algorithms import variants
from chainermn_torus.runtime import report

__all__ = ['kinds', 'refinements', 'key', 'label', 'GRID_CHOICES', 'SEGMENT_CHOICES']

GRID_CHOICES = 2                        # other grids tried for the winning communicator
SEGMENT_CHOICES = (1 << 20, 0)          # tried beside the default on the stage-1 winner


def label(key):
    """(variant, grid, segment or None) as a report writes it: "shm 2x2, segment 1 MiB"."""
    algorithm, grid, segment = key
    return '{}{}{}'.format(algorithm, '' if grid is None else ' {}x{}'.format(*grid),
                           '' if segment is None else ', segment {}'.format(
                               'whole' if segment == 0 else
                               report.format_bytes(segment, exact=True)))


def _kind(name):
    v = variants.get(name)
    return v.communicator, tuple(sorted(v.options.items()))


def _canonical(name):
    """The first variant of the table that builds the same communicator (pure_allreduce for
    its node-aware model): one name per configuration in reports and files."""
    return next(n for n in variants.planned() if _kind(n) == _kind(name))


def key(row, segment=None):
    return (_canonical(row['algorithm']), None if row['grid'] is None else tuple(row['grid']),
            segment)


def kinds(rows, node_grid=None):
    """Stage 1: one configuration of each communicator kind the rows hold, in the order of
    each kind's best row, so that a prediction that ranks a whole kind too low is still
    measured. A kind on grids takes its row on ``node_grid`` (M = ranks per node: rows
    inside nodes, the shape the torus algorithms are built for, and the best of each kind
    in every sweep of bench.tuning here) where the rows have one, else its best row."""
    best = collections.OrderedDict()
    for row in rows:
        best.setdefault(_kind(row['algorithm']), row)
    keys = []
    for kind, row in best.items():
        if row['grid'] is not None and node_grid is not None:
            row = next((r for r in rows if _kind(r['algorithm']) == kind and r['grid']
                        is not None and tuple(r['grid']) == tuple(node_grid)), row)
        keys.append(key(row))
    return keys


def refinements(winner, rows, nbytes, segment_bytes, segments=True, node_grid=None):
    """Stage 2: the stage-1 winner first, then the same communicator on up to
    ``GRID_CHOICES`` other grids (the node-aligned one first, where the winner is not on it;
    then in the rows' order), then the winner with each
    of ``SEGMENT_CHOICES`` that cuts ``nbytes`` into another number of pieces than the
    default ``segment_bytes`` (where ``segments``: not when the user gave a size)."""
    keys = [winner]
    if winner[1] is not None:
        same = [r for r in rows if _kind(r['algorithm']) == _kind(winner[0])
                and r['grid'] is not None and tuple(r['grid']) != winner[1]]
        same.sort(key=lambda r: node_grid is None or tuple(r['grid']) != tuple(node_grid))
        keys += [key(r) for r in same[:GRID_CHOICES]]
    if segments:
        def pieces(seg):
            return 1 if seg == 0 else -(-nbytes // seg)
        have = {pieces(segment_bytes)}
        for seg in SEGMENT_CHOICES:
            if pieces(seg) not in have:
                have.add(pieces(seg))
                keys.append(winner[:2] + (seg,))
    return keys
