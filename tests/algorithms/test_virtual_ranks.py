"""Virtual ranks' spread over processes (algorithms/virtual_ranks.py), the shards they train
on (datasets/shards.py: ChainerMN's scatter_dataset at V ranks, whatever P) and what their
updater refuses (optimizers/virtual_updater.py); no MPI."""
import chainer
import chainer.links as L
import numpy
import pytest
from chainermn.datasets.scatter import _scatter_index

from chainermn_torus.algorithms import virtual_ranks as vr
from chainermn_torus.datasets.shards import virtual_shards
from chainermn_torus.errors import ConfigError
from chainermn_torus.optimizers.virtual_updater import _check_stateless


@pytest.mark.parametrize('virtual,processes,counts', [
    (6, 4, [2, 2, 1, 1]), (6, 6, [1] * 6), (6, 1, [6]), (7, 3, [3, 2, 2]), (4, 2, [2, 2])])
def test_the_spread_is_as_even_as_it_goes_and_covers_every_virtual_rank_once(
        virtual, processes, counts):
    ranges = vr.spread(virtual, processes)
    assert [len(r) for r in ranges] == counts
    assert [v for r in ranges for v in r] == list(range(virtual))
    assert all(vr.held(virtual, processes, p) == ranges[p] for p in range(processes))


def test_the_start_line_says_how_they_are_spread():
    assert vr.describe(6, 4) == '6 virtual ranks on 4 processes: 2 hold 2, 2 hold 1'
    assert vr.describe(4, 2) == '4 virtual ranks on 2 processes: 2 each'
    assert vr.describe(4, 4) == '4 virtual ranks on 4 processes: one each'
    assert vr.describe(4, 1) == '4 virtual ranks on 1 process'


@pytest.mark.parametrize('value,said', [
    (3, "virtual_ranks 3 is fewer than the job's 4 processes"), (0, 'got 0'),
    (2.5, 'got 2.5'), ('six', "got 'six'"), (True, 'got True')])
def test_a_count_below_p_or_not_a_count_is_refused_in_one_line(value, said):
    with pytest.raises(ConfigError) as e:
        vr.check(value, 4)
    assert said in str(e.value) and '\n' not in str(e.value)


@pytest.mark.parametrize('n,virtual', [(1000, 4), (1001, 3), (10, 6)])
def test_each_shard_is_the_one_scatter_dataset_gives_that_rank_of_a_v_rank_job(n, virtual):
    data = numpy.arange(n)
    order = numpy.random.RandomState(7).permutation(n)
    for p in (1, 2, virtual):
        for rank, run in enumerate(vr.spread(virtual, p)):
            for v, shard in zip(run, virtual_shards(data, virtual, run, seed=7)):
                _, b, e = list(_scatter_index(n, virtual, True))[v]
                assert [shard[i] for i in range(len(shard))] == \
                    [data[order[i % n]] for i in range(b, e)]


def test_the_updater_refuses_batch_normalization_whose_statistics_a_virtual_rank_owns():
    model = chainer.Sequential(L.Linear(3, 4), L.BatchNormalization(4))
    with pytest.raises(ConfigError) as e:
        _check_stateless(model)
    assert 'BatchNormalization' in str(e.value) and 'virtual ranks' in str(e.value)
    _check_stateless(chainer.Sequential(L.Linear(3, 4)))   # nothing to keep: accepted
