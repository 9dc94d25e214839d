"""What the tests of chainermn_torus.compute share: Chainer's numpy, then ours, on the same
call; the oneDNN seam left as each test found it."""
import pytest

from chainermn_torus.compute import onednn


@pytest.fixture(autouse=True)
def as_it_was():
    was = onednn.enabled()
    yield
    (onednn.enable if was else onednn.disable)()


def both(run):
    """``run()`` on Chainer's numpy, then with Chainer's functions on oneDNN."""
    onednn.disable()
    theirs = run()
    onednn.enable()
    mine = run()
    return theirs, mine
