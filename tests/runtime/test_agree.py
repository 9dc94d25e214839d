"""runtime.agree: a problem found on some ranks is raised on every rank, naming all of them,
with real ranks (2, 3, 4); and alone (no communicator)."""
import pytest

from chainermn_torus.runtime import agree


@pytest.mark.parametrize('nprocs', [2, 3, pytest.param(4, marks=pytest.mark.slow)])
def test_every_rank_raises_the_same_error_naming_every_rank_at_fault(mpi_world, nprocs):
    for faulty in ([], [1], [0, nprocs - 1]):
        said = mpi_world(nprocs, 'check_agree', 'check', faulty)
        assert len(said) == nprocs and len(set(said)) == 1, said  # the same on every rank
        if not faulty:
            assert said[0] is None
        else:
            assert said[0] == 'rank(s) {}: {}'.format(
                ', '.join(map(str, faulty)),
                '; '.join(f'disk full on rank {r}' for r in faulty))


def test_alone_the_process_is_rank_zero():
    assert agree.problems(None, None) == []
    assert agree.problems(None, 'x') == [(0, 'x')]
    with pytest.raises(ValueError, match='rank 0: x'):
        agree.raise_everywhere(
            None, 'x', lambda bad: ValueError(f'rank {agree.ranks_text(bad)}: {bad[0][1]}'))
