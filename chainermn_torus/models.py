"""The models the examples, benchmarks and tests share.

``MLP`` is the MNIST multi-layer perceptron of ChainerMN's example (784-n_units-n_units-10,
ReLU), the model of Kuroda et al.'s K computer measurements with ``n_units=1000``
(1,796,010 parameters). ``ResNet50`` is Chainer's ``ResNet50Layers`` with a classifier
for the data's classes, the ImageNet example's main network; ``TinyNet`` is its smoke-test
network; ``NIN`` is Network in Network (Lin et al. 2014) in the geometry of Chainer's
ImageNet example (227 px, four mlpconv blocks, global average pooling): with ResNet-50, the
networks ``bench compute`` times.
"""
import chainer
import chainer.functions as F
import chainer.links as L

__all__ = ['MLP', 'ResNet50', 'TinyNet', 'NIN']


class MLP(chainer.Chain):

    def __init__(self, n_units=1000, n_out=10):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(784, n_units)
            self.l2 = L.Linear(n_units, n_units)
            self.l3 = L.Linear(n_units, n_out)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


class ResNet50(chainer.Chain):
    """Chainer's ResNet-50 (random initial weights) with a classifier for n_classes."""

    def __init__(self, n_classes):
        super().__init__()
        with self.init_scope():
            self.trunk = L.ResNet50Layers(pretrained_model=None)
        # ImageNet's 1000-way layer replaced: only this dataset's classes, and no unused
        # parameters that every all-reduce would carry as zeros.
        del self.trunk.fc6
        with self.trunk.init_scope():
            self.trunk.fc6 = L.Linear(2048, n_classes)

    def forward(self, x):
        return self.trunk(x, layers=['fc6'])['fc6']


class TinyNet(chainer.Chain):
    """Three stride-2 conv + BN + ReLU blocks (16, 32, 64 channels), global average pooling
    and a linear classifier: milliseconds per 64x64 image on one core, for smoke tests."""

    def __init__(self, n_classes):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(3, 16, 3, 2, 1, nobias=True)
            self.bn1 = L.BatchNormalization(16)
            self.conv2 = L.Convolution2D(16, 32, 3, 2, 1, nobias=True)
            self.bn2 = L.BatchNormalization(32)
            self.conv3 = L.Convolution2D(32, 64, 3, 2, 1, nobias=True)
            self.bn3 = L.BatchNormalization(64)
            self.fc = L.Linear(64, n_classes)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = F.relu(self.bn3(self.conv3(h)))
        return self.fc(F.mean(h, axis=(2, 3)))


class NIN(chainer.Chain):
    """Network in Network for 227 x 227 images: three mlpconv blocks each followed by 3 x 3
    max pooling of stride 2, dropout, a fourth block whose last layer has a channel per
    class, and 6 x 6 average pooling."""

    insize = 227

    def __init__(self, n_classes=1000):
        super().__init__()
        with self.init_scope():
            self.mlpconv1 = L.MLPConvolution2D(None, (96, 96, 96), 11, stride=4)
            self.mlpconv2 = L.MLPConvolution2D(None, (256, 256, 256), 5, pad=2)
            self.mlpconv3 = L.MLPConvolution2D(None, (384, 384, 384), 3, pad=1)
            self.mlpconv4 = L.MLPConvolution2D(None, (1024, 1024, n_classes), 3, pad=1)

    def forward(self, x):
        h = F.max_pooling_2d(F.relu(self.mlpconv1(x)), 3, stride=2)
        h = F.max_pooling_2d(F.relu(self.mlpconv2(h)), 3, stride=2)
        h = F.max_pooling_2d(F.relu(self.mlpconv3(h)), 3, stride=2)
        h = self.mlpconv4(F.dropout(h))
        return F.reshape(F.average_pooling_2d(h, 6), (len(x), -1))
