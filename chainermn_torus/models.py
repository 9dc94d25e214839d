"""The models the examples, benchmarks and tests share.

``MLP`` is the MNIST multi-layer perceptron of ChainerMN's example (784-n_units-n_units-10,
ReLU), the model of Kuroda et al.'s K computer measurements with ``n_units=1000``
(1,796,010 parameters).
"""
import chainer
import chainer.functions as F
import chainer.links as L

__all__ = ['MLP']


class MLP(chainer.Chain):

    def __init__(self, n_units=1000, n_out=10):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(784, n_units)
            self.l2 = L.Linear(n_units, n_units)
            self.l3 = L.Linear(n_units, n_out)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))
