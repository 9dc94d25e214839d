"""The columns of the conformance matrix at P ranks (check_conformance.py), without MPI: the
pytest side reads them to name one test per (variant, P); and the variants the exact-mean job
runs (``tested``, check_mean.py)."""
import numpy

from chainermn_torus.algorithms.variants import VARIANTS, benchmarked


def tested():
    """(name, rank counts) for the exact-mean job, in table order."""
    return [(v.name, v.test_ranks) for v in VARIANTS.values() if v.test_ranks]


def variants(p):
    """(label, name, options): every variant of the table (algorithms.variants) at the rank
    counts it is tested at, the ones run only when asked (rsap's PSCW) included, and the
    defaults and float16 paths the table does not pin."""
    names = benchmarked(asked=True)
    # A variant runs where the table tests it (rsap's PSCW stops at P = 3: its hang).
    out = [(v.name, v.communicator, v.options) for v in VARIANTS.values()
           if v.name in names and p in v.test_ranks]
    f16 = numpy.float16
    out += [
        # On one node rsaa's default is shared memory (rsap's is the 'shm' variant).
        ('rsaa shm', 'rsaa', {'shm': True}),
        ('pure_allreduce fp16', 'pure_allreduce', {'allreduce_grad_dtype': f16}),
        ('rsaa fp16', 'rsaa', {'allreduce_grad_dtype': f16}),
        ('rsap fp16', 'rsap', {'allreduce_grad_dtype': f16}),
        ('auto', 'auto', {'network': 'ofp'}),
    ]
    if p % 2 == 0 and p > 2:
        # A grid with a column phase (N > 1) on one node: rows are not nodes, no shm.
        out.append(('rsaa 2xN', 'rsaa', {'grid': (2, p // 2), 'shm': False}))
        out.append(('rsap 2xN', 'rsap', {'grid': (2, p // 2), 'shm': False}))
    return out
