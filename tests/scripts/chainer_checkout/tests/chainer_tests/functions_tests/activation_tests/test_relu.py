import sys

import numpy

import chainer.functions as F
from chainer import testing


@testing.inject_backend_tests(None, [{}])
class TestReLU(testing.FunctionTestCase):

    skip_double_backward_test = True

    def generate_inputs(self):
        x = numpy.random.RandomState(0).uniform(-1, 1, (3, 5))  # small: the kernels all the same.astype(numpy.float32)
        x[abs(x) < 0.1] = 0.5
        return x,

    def forward(self, inputs, device):
        return F.relu(inputs[0]),

    def forward_expected(self, inputs):
        return numpy.maximum(inputs[0], 0),


def test_plain_chainer_is_the_baseline():
    # fails in the runs with the plugin: the one failure the script must name
    assert 'chainermn_torus' not in sys.modules
