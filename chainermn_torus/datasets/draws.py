"""Random augmentation that does not depend on which process draws it.

A crop drawn from a per-process random state differs with the process: another rank, a
loader worker that received a pickled copy of the dataset, or a resumed job all draw other
crops, so no two runs at P >= 2 were the same. Here the random state of one draw is a
function of (dataset seed, pass over the data, example index) only:

* the pass is the epoch the iterator is in, told to this process by ``set_epoch`` (our
  loader's workers receive it with each batch; the ImageNet example's updater sets it before
  each batch). A resumed job restores the iterator's epoch, so it draws the same crops;
* where nobody told the epoch (Chainer's iterators in an unchanged script), the pass is how
  many times this process has drawn that example: the same on every run of a serial loader,
  not across loader workers (which worker reads which example is not fixed), and not across
  a resume.
"""
import numpy

from chainermn_torus.process import STATE

__all__ = ['set_epoch', 'epoch', 'random_state', 'Counter']


def set_epoch(value):
    """The pass over the data this process's next draws belong to (None: not known)."""
    STATE.draw_epoch = None if value is None else int(value)


def epoch():
    return STATE.draw_epoch


class Counter:
    """Per-example draw counts: the pass where no epoch was set."""

    def __init__(self):
        self.counts = {}

    def next(self, index):
        n = self.counts.get(index, 0)
        self.counts[index] = n + 1
        return n


def random_state(seed, index, counter):
    """A RandomState for one draw of example ``index`` (see the module doc)."""
    e = STATE.draw_epoch
    if e is None:
        key = (0, counter.next(index))
    else:
        key = (1, e)
    return numpy.random.RandomState([seed & 0xFFFFFFFF, key[0], key[1] & 0xFFFFFFFF,
                                     int(index) & 0xFFFFFFFF])
