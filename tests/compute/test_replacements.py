"""One description per replaced function (``replacements.REPLACEMENTS``): the docs' table is the
code's, every patch is in one row, the start-up line names every row; and the one
lifecycle of a layer's primitives (``compute.onednn.layer``): steps made once, the backward's
workspace bound from its own descriptor."""
import os

import numpy
import pytest

from chainermn_torus.compute import replacements
from chainermn_torus.compute.onednn import binding, geometries, layer, lrn, pooling
from conftest import ROOT

needs_onednn = pytest.mark.skipif(
    not binding.available(), reason='oneDNN is not installed for this Python (make setup '
    f'installs onednn-cpu-gomp on x86-64): {binding.why_unavailable()}')


def test_the_docs_table_is_the_codes():
    text = open(os.path.join(ROOT, 'docs', 'compute.md')).read()
    assert replacements.table() in text


def test_each_patch_is_in_one_row_and_each_row_says_everything():
    places = [(cls, method) for cls, method, _ in replacements._REPLACEMENTS]
    assert len(places) == len(set(places))
    for row in replacements.REPLACEMENTS:
        assert row.patches and all(row[i] for i in range(len(row))), row.function
        assert f'{row.function} ({row.said})' in replacements.REPLACED
        for cls, method, make in row.patches:
            assert method in cls.__dict__ and callable(make), (cls, method)
    assert set(replacements._BACKWARDS) == {cls for cls, _ in places}


@needs_onednn
def test_a_layer_makes_each_step_once_and_the_hint_once():
    x = numpy.random.RandomState(0).uniform(-1, 1, (2, 3, 8, 8)).astype(numpy.float32)
    geometries.clear()
    y, ws = pooling.max_forward(x, (2, 2), (2, 2), (0, 0))
    p = pooling.pooling('max', x.shape, y.shape, (2, 2), (2, 2), (0, 0))
    assert isinstance(p, layer.Layer) and p._hint is None  # evaluation makes no backward
    first = p.step('forward')
    pooling.max_backward(numpy.ones_like(y), ws, x.shape, (2, 2), (2, 2), (0, 0))
    hint = p._hint
    pooling.max_backward(numpy.ones_like(y), ws, x.shape, (2, 2), (2, 2), (0, 0))
    assert p.step('forward') is first and p._hint is hint and hint is not None
    assert set(p._made) == {'forward', 'backward'}


@needs_onednn
@pytest.mark.parametrize('kind', ['max pooling', 'lrn'])
def test_a_backward_after_its_geometry_left_the_cache_takes_the_forwards_workspace(kind):
    # A geometry dropped between a forward and its backward (more shapes than the bound)
    # comes back as a new object that never ran its forward: its backward still binds the
    # workspace, from the backward's own descriptor, and gives the same gradient.
    rng = numpy.random.RandomState(1)
    x = rng.uniform(-1, 1, (2, 6, 9, 9)).astype(numpy.float32)

    def grads(drop):
        geometries.clear()
        if kind == 'lrn':
            y, ws = lrn.forward(x, 5, 2, 1e-4, .75)
            gy = numpy.linspace(-1, 1, y.size, dtype=numpy.float32).reshape(y.shape)
            if drop:
                geometries.clear()
            return lrn.backward(x, gy, ws, 5, 2, 1e-4, .75)
        y, ws = pooling.max_forward(x, (3, 3), (2, 2), (1, 1))
        gy = numpy.linspace(-1, 1, y.size, dtype=numpy.float32).reshape(y.shape)
        if drop:
            geometries.clear()
        return pooling.max_backward(gy, ws, x.shape, (3, 3), (2, 2), (1, 1))

    kept, dropped = grads(False), grads(True)
    assert numpy.array_equal(kept, dropped)
    assert numpy.abs(kept).sum() > 0


@needs_onednn
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                    reason='needs 2 CPUs: a budget of 2 threads is capped at the CPUs here')
def test_a_new_thread_count_makes_the_primitives_again():
    # oneDNN fixes the thread count a primitive runs with when it makes it: one made at 1
    # thread ran at 1 after the budget became 2 (8.3 ms against 4.4 ms made anew).
    from chainermn_torus.runtime.cpu import threads
    x = numpy.ones((2, 4, 6, 6), numpy.float32)
    W = numpy.ones((4, 4, 3, 3), numpy.float32)
    key = (x.shape, W.shape, (2, 4, 6, 6), (1, 1), (1, 1), (1, 1), 1, False)
    before = threads.pools_in_force().get('openmp')
    try:
        threads.ensure(None, 1)
        from chainermn_torus.compute.onednn import conv
        y1 = conv.forward(x, W, None, (1, 1), (1, 1))
        first = conv.convolution(*key)
        threads.ensure(None, 1)  # the same count: kept
        assert conv.convolution(*key) is first
        threads.ensure(None, 2)
        second = conv.convolution(*key)
        assert second is not first
        assert numpy.array_equal(conv.forward(x, W, None, (1, 1), (1, 1)), y1)
    finally:
        threads.ensure(None, before or 1)
