"""A lost node's virtual ranks taken over by the survivors (issue 85): from node memory and
from a disk checkpoint, the job ends with the bits of the same job never interrupted."""
import re

import numpy
import pytest

from chainermn_torus.datasets.shards import KeyedOrder
from chainermn_torus.extensions.checkpoint import resharding
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from conftest import run_mpi, worker


@pytest.mark.parametrize('virtual, before, after, rank, expected', [
    # V = 4 from 4 ranks to 2: rank 1 takes over stored ranks 2 and 3's only slots
    (4, 4, 2, 1, [(2, 0, 0), (3, 0, 1)]),
    # V = 6 from 3 x 2 ranks to 2 x 2: rank 1 holds 2, 3 (stored rank 2's and 3's)
    (6, 6, 4, 1, [(2, 0, 0), (3, 0, 1)]),
    (6, 6, 4, 3, [(5, 0, 0)]),
    # V = 5 from 2 ranks (3 + 2) to 3 (2 + 2 + 1): stored rank 0's slot 2 becomes slot 0
    (5, 2, 3, 1, [(0, 2, 0), (1, 0, 1)]),
    (5, 2, 3, 2, [(1, 1, 0)]),
    (5, 3, 1, 0, [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3), (2, 0, 4)]),
])
def test_each_virtual_rank_comes_from_the_rank_that_held_it(virtual, before, after, rank,
                                                           expected):
    assert resharding.virtual_sources(virtual, before, after, rank) == expected


def test_a_checkpoint_resumes_only_as_the_virtual_ranks_it_was_written_as():
    resharding.check_virtual({'virtual_ranks': 6}, 6, '/ck')
    resharding.check_virtual({}, None, '/ck')   # neither has them
    for stored, now, said in ((6, 4, 'it was written as 6 virtual ranks and this job computes '
                                      'as 4 virtual ranks; resume with --virtual-ranks 6'),
                              (None, 4, 'written without virtual ranks and this job computes '
                                        'as 4 virtual ranks; resume without virtual ranks'),
                              (6, None, 'resume with --virtual-ranks 6')):
        with pytest.raises(CheckpointError) as e:
            resharding.check_virtual({'virtual_ranks': stored}, now, '/ck')
        assert said in str(e.value) and "'/ck'" in str(e.value)


def test_the_keyed_order_draws_from_the_order_it_follows_and_nothing_else():
    a, b = KeyedOrder(0, 3), KeyedOrder(0, 3)
    first = a(numpy.arange(10), 0)
    assert sorted(first) == list(range(10))
    second = a(first, 10)
    # another sampler, as a restored iterator makes afresh, given the stored order: the same
    assert b(first, 10).tolist() == second.tolist()
    assert second.tolist() != first.tolist()
    assert KeyedOrder(0, 4)(numpy.arange(10), 0).tolist() != first.tolist()  # the key counts


@pytest.mark.slow  # 4 ranks, 2 emulated nodes: the full tier
@pytest.mark.parametrize('lost', [0, 1], ids=['first-node', 'last-node'])
def test_survivors_take_over_the_lost_nodes_virtual_ranks_bit_for_bit(tmp_path, lost):
    proc = run_mpi(4, [worker('virtual_takeover.py'), str(tmp_path), str(lost)], timeout=240,
                   env={'CHAINERMN_TORUS_THREADS': '1'})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    oks = re.findall(r'OK rank (\d) max abs difference ([0-9.e-]+) over (\d+) arrays',
                     proc.stdout)
    assert sorted(o[:2] for o in oks) == [('0', '0.0'), ('1', '0.0')], proc.stdout[-2000:]
    assert 'resumed from node memory' in proc.stdout
    assert 'written by 4 ranks, on 2; 4 virtual ranks, each taken over from the rank that ' \
        'held it' in proc.stdout, proc.stdout[-2000:]
