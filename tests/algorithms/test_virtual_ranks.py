"""Virtual ranks' spread over processes (algorithms/virtual_ranks.py), the shards they train
on (datasets/shards.py: ChainerMN's scatter_dataset at V ranks, whatever P) and what their
updater swaps (optimizers/virtual_updater.py); no MPI."""
import chainer
import chainer.links as L
import numpy
import pytest
from chainermn.datasets.scatter import _scatter_index

from chainermn_torus.algorithms import virtual_ranks as vr
from chainermn_torus.datasets.shards import virtual_shards
from chainermn_torus.errors import ConfigError
from chainermn_torus.optimizers.virtual_updater import HeldState


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


def test_a_held_state_swaps_the_random_state_and_the_running_statistics_in_place():
    numpy.random.seed(3)
    model = chainer.Sequential(L.Linear(3, 4), L.BatchNormalization(4))
    bn = model[1]
    mean = bn.avg_mean
    first, second = HeldState(model), HeldState(model)
    x = numpy.random.RandomState(0).standard_normal((5, 3)).astype(numpy.float32)
    first.load()
    drawn = numpy.random.rand()
    with chainer.using_config('train', True):
        model(x)
    first.save()
    second.load()   # the other virtual rank: the statistics and the draws it started with
    assert bn.avg_mean is mean and not bn.avg_mean.any() and (bn.avg_var == 1).all()
    assert numpy.random.rand() == drawn
    first.load()
    assert bn.avg_mean.any() and (bn.avg_var != 1).any() and numpy.random.rand() != drawn
