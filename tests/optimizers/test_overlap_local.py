"""overlap=True's parts that need no MPI: following gradients during Chainer's backward,
buckets, and cutting a segment plan at bucket bounds."""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from chainermn_torus.algorithms import segments
from chainermn_torus.communicators import _packing
from chainermn_torus.optimizers.overlap import GradientTracker, make_buckets


class Net(chainer.Chain):
    def __init__(self):
        super().__init__()
        numpy.random.seed(0)
        with self.init_scope():
            self.first = L.Linear(6, 8)
            self.shared = L.Linear(8, 8)
            self.last = L.Linear(8, 3)
            self.unused = L.Linear(2, 2)

    def forward(self, x):
        h = F.tanh(self.first(x))
        h = F.relu(self.shared(h)) + F.sigmoid(self.shared(h))  # two uses of one link
        return F.sum(self.last(h) ** 2)


def _follow(model, x):
    named = [(n, p) for n, p in sorted(model.namedparams())]
    params = [p for _, p in named]
    seen = []

    class Counting(GradientTracker):
        functions = 0

        def backward_postprocess(self, function, in_data, out_grad):
            Counting.functions += 1
            super().backward_postprocess(function, in_data, out_grad)

    tracker = Counting()

    def on_final(i, grad):
        seen.append((named[i][0], grad, Counting.functions))

    model.cleargrads()
    loss = model(x)
    tracker.arm(loss, [p.node for p in params], on_final)
    with tracker:
        loss.backward()
    total = Counting.functions
    tracker.finish(params)
    return seen, total, tracker


def test_gradients_reported_during_backward_are_chainers_own():
    model = Net()
    x = numpy.random.RandomState(1).standard_normal((4, 6)).astype(numpy.float32)
    seen, total, tracker = _follow(model, x)
    assert tracker.broken is None
    names = [n for n, _, _ in seen]
    assert sorted(names) == sorted(n for n, _ in model.namedparams())
    # The last layer is final first, the shared one after both of its uses, the first
    # layer last; the unused one is reported at the end, without a gradient.
    assert names[:2] == ['/last/W', '/last/b'], names
    assert names.index('/shared/W') < names.index('/first/W'), names
    assert names[-2:] == ['/unused/W', '/unused/b'], names
    at = {n: count for n, _, count in seen}
    assert at['/last/W'] < total, 'the last layer was reported only after backward ended'
    assert at['/shared/W'] < total
    params = dict(model.namedparams())
    for name, grad, _ in seen:
        if name.startswith('/unused'):
            assert grad is None and params[name].grad is None
        else:
            # The very array Chainer assigns after backward: nothing summed twice or copied.
            assert grad is params[name].grad, name


def test_shared_parameter_summed_as_chainer_sums_it():
    model = Net()
    x = numpy.random.RandomState(2).standard_normal((4, 6)).astype(numpy.float32)
    model.cleargrads()
    model(x).backward()
    want = {n: p.grad.copy() for n, p in model.namedparams() if p.grad is not None}
    seen, _, _ = _follow(model, x)
    for name, grad, _ in seen:
        if grad is not None:
            assert (grad == want[name]).all(), name


def test_unreadable_backward_frame_reports_everything_at_the_end():
    model = Net()
    params = [p for _, p in sorted(model.namedparams())]
    tracker = GradientTracker()
    seen = []
    model.cleargrads()
    loss = model(numpy.ones((2, 6), numpy.float32))
    tracker.arm(loss, [p.node for p in params], lambda i, g: seen.append(i))
    tracker.backward_postprocess(loss.creator_node, (), ())  # not called from backward
    assert tracker.broken and '7.8.1' in tracker.broken, tracker.broken
    loss.backward()
    assert seen == []
    tracker.finish(params)
    assert sorted(seen) == list(range(len(params)))


@pytest.mark.parametrize('sizes, itemsize, limit, want', [
    ([10, 300, 5, 5, 1000], 4, 400, [0, 10, 310, 320, 1320]),
    ([10, 20, 30], 4, 1000, [0, 60]),
    ([100, 100], 2, 400, [0, 200]),
    ([100, 100], 2, 399, [0, 100, 200]),
    ([7], 4, 0, [0, 7]),
    ([], 4, 100, [0, 0]),
])
def test_make_buckets(sizes, itemsize, limit, want):
    assert make_buckets(sizes, itemsize, limit) == want


def test_split_plan_cuts_segments_at_bucket_bounds():
    layout = _packing.Layout([('a', (7,), 'f4'), ('b', (50,), 'f4'), ('c', (3,), 'f4'),
                              ('d', (4,), 'f4'), ('e', (30,), 'f4')])
    plan = segments.plan_segments(layout.offsets, 16)
    bounds = [0, 7, 57, 64, 94]
    pieces = segments.split_plan(plan, bounds)
    assert len(pieces) == 4
    covered = []
    for k, piece in enumerate(pieces):
        for lo, hi, index in piece:
            assert bounds[k] <= lo < hi <= bounds[k + 1], (k, lo, hi)
            assert hi - lo <= 16
            covered.extend(range(lo, hi))
    assert covered == list(range(94))
    # Segments sent straight from one array keep their array index.
    assert all(index == 1 for _, _, index in pieces[1])
