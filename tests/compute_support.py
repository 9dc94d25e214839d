"""What the tests of chainermn_torus.compute share: Chainer's numpy, then ours, on the same
call; the oneDNN seam left as each test found it."""
import pytest

from chainermn_torus.compute import replacements


@pytest.fixture(autouse=True)
def as_it_was():
    was = replacements.enabled()
    yield
    (replacements.enable if was else replacements.disable)()


def both(run):
    """``run()`` on Chainer's numpy, then with Chainer's functions on oneDNN."""
    replacements.disable()
    theirs = run()
    replacements.enable()
    mine = run()
    return theirs, mine
