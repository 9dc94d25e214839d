"""The test harness's worlds (tests/mpi_world.py) on real ranks: checks reuse one world, a
failure on one rank or a hang fails its check with every rank's report, and the next check
gets a new world."""
import os
import time

import pytest

import mpi_world as harness
from conftest import job_env, mpiexec_path

# world: with nothing beside them under `make test` (scripts/test_lanes.sh), as the worlds:
# the first test counts every file in /dev/shm, and the second times a hang.
pytestmark = [pytest.mark.mpi, pytest.mark.world]


@pytest.fixture
def worlds(tmp_path):
    w = harness.Worlds(str(tmp_path), [mpiexec_path()], job_env(3))
    yield w
    w.close()


@pytest.mark.slow  # the fast tier runs every world check through this harness
def test_checks_share_one_world_until_one_fails(worlds):
    shm_before = set(os.listdir('/dev/shm'))
    first = worlds.run(3, 'world_selftest', 'ranks')
    assert [(r, s) for r, s, _ in first] == [(0, 3), (1, 3), (2, 3)]
    assert worlds.run(3, 'world_selftest', 'ranks') == first  # the same processes
    # Environment variables of a request hold for that check only.
    assert worlds.run(3, 'world_selftest', 'environment', 'WORLD_TEST',
                      env={'WORLD_TEST': 'x'}) == ['x'] * 3
    assert worlds.run(3, 'world_selftest', 'environment', 'WORLD_TEST') == [None] * 3
    start = time.time()
    with pytest.raises(harness.CheckFailed) as e:
        worlds.run(3, 'world_selftest', 'raise_on', 1, timeout=60)
    message = str(e.value)
    assert time.time() - start < harness.GRACE + 10  # not the 60 s limit
    assert 'rank 1 fails on purpose' in message and 'ValueError' in message
    # The others were in the barrier: each is named, with its Python stack.
    for rank in (0, 2):
        assert f'rank {rank} (pid' in message
    assert message.count('after another rank failed; its stack') == 2
    assert 'raise_on' in message.split('rank 2 (pid')[1]
    assert not [n for n in os.listdir('/dev/shm') if n not in shm_before], \
        'the killed world left files in /dev/shm'
    again = worlds.run(3, 'world_selftest', 'ranks')  # a new world
    assert {p for _, _, p in again}.isdisjoint({p for _, _, p in first})
    assert worlds.started == {3: 2}


@pytest.mark.slow
def test_a_hang_fails_its_check_within_the_limit(worlds):
    start = time.time()
    with pytest.raises(harness.CheckFailed) as e:
        worlds.run(2, 'world_selftest', 'sleep', 600, timeout=2)
    assert time.time() - start < 15
    message = str(e.value)
    assert message.count('no answer within 2 s (hang?)') == 2, message
    assert 'in sleep' in message and 'world_selftest.py' in message
    assert worlds.run(2, 'world_selftest', 'ranks')[1][:2] == (1, 2)
