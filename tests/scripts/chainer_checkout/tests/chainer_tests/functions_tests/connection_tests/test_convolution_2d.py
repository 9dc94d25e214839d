import sys

import numpy

import chainer.functions as F
from chainer import testing


@testing.inject_backend_tests(None, [{}])
class TestConvolution2D(testing.FunctionTestCase):

    skip_double_backward_test = True
    check_backward_options = {'atol': 5e-3, 'rtol': 5e-2}

    def generate_inputs(self):
        rng = numpy.random.RandomState(1)
        return (rng.uniform(-1, 1, (2, 3, 6, 6)).astype(numpy.float32),
                rng.uniform(-1, 1, (4, 3, 3, 3)).astype(numpy.float32))

    def forward(self, inputs, device):
        return F.convolution_2d(*inputs, pad=1),

    def forward_expected(self, inputs):
        # as Chainer's own tests do: the function itself gives the expected values, which
        # the plugin has computed with the replacements off
        modes = sys.modules.get('chainermn_torus.compute.modes')
        assert modes is None or not modes.enabled()
        return F.convolution_2d(*inputs, pad=1).array,
