import pytest

from chainermn_torus.communicators._grid import GRID_ENV, default_grid, parse_grid


@pytest.mark.parametrize('value,size,expected', [
    ((2, 3), 6, (2, 3)), ('2x3', 6, (2, 3)), ('4X2', 8, (4, 2)), ('1x7', 7, (1, 7)),
    ('7,1', 7, (7, 1)), ((1, 1), 1, (1, 1))])
def test_parse_grid_accepts_shapes_that_fit(value, size, expected):
    assert parse_grid(value, size) == expected


def test_parse_grid_names_p_the_shape_and_what_fits():
    with pytest.raises(ValueError) as e:
        parse_grid((3, 2), 4)
    msg = str(e.value)
    assert '(3, 2)' in msg and 'P = 4' in msg and '(1, 4), (2, 2), (4, 1)' in msg


@pytest.mark.parametrize('bad', ['2by2', 'x', '', (2,), (0, 4), (-2, -2), (1.5, 2), None])
def test_parse_grid_rejects_malformed_values(bad):
    with pytest.raises(ValueError, match='chainermn_torus'):
        parse_grid(bad, 4)


def test_default_grid_rows_are_nodes_when_several_ranks_per_node(monkeypatch):
    monkeypatch.delenv(GRID_ENV, raising=False)
    assert default_grid(8, 4, 2)[0] == (4, 2)
    assert default_grid(4, 4, 1)[0] == (4, 1)    # one node: one row


@pytest.mark.parametrize('size,expected', [(1, (1, 1)), (2, (2, 1)), (6, (2, 3)),
                                           (9, (3, 3)), (7, (7, 1)), (256, (2, 128))])
def test_default_grid_one_rank_per_node_uses_smallest_prime_factor(monkeypatch, size, expected):
    monkeypatch.delenv(GRID_ENV, raising=False)
    assert default_grid(size, 1, size)[0] == expected


def test_default_grid_uneven_nodes_fall_back(monkeypatch):
    monkeypatch.delenv(GRID_ENV, raising=False)
    assert default_grid(6, 4, 2, node_uniform=False)[0] == (2, 3)


def test_environment_variable_sets_and_is_checked():
    # the settings' value, handed down by the communicator (its settings['grid'])
    assert default_grid(8, 8, 1, env='2x4') == ((2, 4), 'from ' + GRID_ENV)
    with pytest.raises(ValueError, match=GRID_ENV):
        default_grid(8, 8, 1, env='3x3')
