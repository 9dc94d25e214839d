"""The ImageNet networks of a GPU-written ChainerMN ImageNet script, written for these tests in
the shape of ChainerMN v7.8.1's examples/imagenet/models/: each has ``insize`` (the crop the
script cuts) and is called as a classifier (images, labels) -> loss, reporting loss and
accuracy. ``tiny`` is a small network for tests that run many ranks on few cores."""
import chainer
import chainer.functions as F
import chainer.links as L


class _Classifier(chainer.Chain):

    def __call__(self, x, t):
        y = self.predict(x)
        loss = F.softmax_cross_entropy(y, t)
        chainer.report({'loss': loss, 'accuracy': F.accuracy(y, t)}, self)
        return loss


class Alex(_Classifier):
    """AlexNet (one tower), 227 px."""
    insize = 227

    def __init__(self, n_classes=1000):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(None, 96, 11, stride=4)
            self.conv2 = L.Convolution2D(None, 256, 5, pad=2)
            self.conv3 = L.Convolution2D(None, 384, 3, pad=1)
            self.conv4 = L.Convolution2D(None, 384, 3, pad=1)
            self.conv5 = L.Convolution2D(None, 256, 3, pad=1)
            self.fc6 = L.Linear(None, 4096)
            self.fc7 = L.Linear(None, 4096)
            self.fc8 = L.Linear(None, n_classes)

    def predict(self, x):
        h = F.max_pooling_2d(F.local_response_normalization(F.relu(self.conv1(x))), 3, 2)
        h = F.max_pooling_2d(F.local_response_normalization(F.relu(self.conv2(h))), 3, 2)
        h = F.relu(self.conv4(F.relu(self.conv3(h))))
        h = F.max_pooling_2d(F.relu(self.conv5(h)), 3, 2)
        h = F.dropout(F.relu(self.fc6(h)))
        h = F.dropout(F.relu(self.fc7(h)))
        return self.fc8(h)


class NIN(_Classifier):
    """Network in Network, 227 px."""
    insize = 227

    def __init__(self, n_classes=1000):
        super().__init__()
        w = chainer.initializers.HeNormal()
        with self.init_scope():
            self.mlpconv1 = L.MLPConvolution2D(None, (96, 96, 96), 11, stride=4, conv_init=w)
            self.mlpconv2 = L.MLPConvolution2D(None, (256, 256, 256), 5, pad=2, conv_init=w)
            self.mlpconv3 = L.MLPConvolution2D(None, (384, 384, 384), 3, pad=1, conv_init=w)
            self.mlpconv4 = L.MLPConvolution2D(None, (1024, 1024, n_classes), 3, pad=1,
                                               conv_init=w)

    def predict(self, x):
        h = F.max_pooling_2d(F.relu(self.mlpconv1(x)), 3, stride=2)
        h = F.max_pooling_2d(F.relu(self.mlpconv2(h)), 3, stride=2)
        h = F.max_pooling_2d(F.relu(self.mlpconv3(h)), 3, stride=2)
        h = self.mlpconv4(F.dropout(h))
        return F.reshape(F.average_pooling_2d(h, 6), (len(x), -1))


class GoogLeNetBN(_Classifier):
    """GoogLeNet with batch normalization (Chainer's InceptionBN blocks), 224 px; the two
    auxiliary classifiers of the paper left out."""
    insize = 224

    def __init__(self, n_classes=1000):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(None, 64, 7, stride=2, pad=3, nobias=True)
            self.norm1 = L.BatchNormalization(64)
            self.conv2 = L.Convolution2D(None, 192, 3, pad=1, nobias=True)
            self.norm2 = L.BatchNormalization(192)
            self.inc3a = L.InceptionBN(None, 64, 64, 64, 64, 96, 'avg', 32)
            self.inc3b = L.InceptionBN(None, 64, 64, 96, 64, 96, 'avg', 64)
            self.inc3c = L.InceptionBN(None, 0, 128, 160, 64, 96, 'max', stride=2)
            self.inc4a = L.InceptionBN(None, 224, 64, 96, 96, 128, 'avg', 128)
            self.inc4b = L.InceptionBN(None, 192, 96, 128, 96, 128, 'avg', 128)
            self.inc4e = L.InceptionBN(None, 0, 128, 192, 192, 256, 'max', stride=2)
            self.inc5a = L.InceptionBN(None, 352, 192, 320, 160, 224, 'avg', 128)
            self.inc5b = L.InceptionBN(None, 352, 192, 320, 192, 224, 'max', 128)
            self.out = L.Linear(None, n_classes)

    def predict(self, x):
        h = F.max_pooling_2d(F.relu(self.norm1(self.conv1(x))), 3, stride=2, pad=1)
        h = F.max_pooling_2d(F.relu(self.norm2(self.conv2(h))), 3, stride=2, pad=1)
        h = self.inc3c(self.inc3b(self.inc3a(h)))
        h = self.inc4e(self.inc4b(self.inc4a(h)))
        h = self.inc5b(self.inc5a(h))
        return self.out(F.average_pooling_2d(h, 7))


class _Bottleneck(chainer.Chain):

    def __init__(self, in_size, mid, out_size, stride):
        super().__init__()
        w = chainer.initializers.HeNormal()
        with self.init_scope():
            self.conv1 = L.Convolution2D(in_size, mid, 1, stride, 0, initialW=w, nobias=True)
            self.bn1 = L.BatchNormalization(mid)
            self.conv2 = L.Convolution2D(mid, mid, 3, 1, 1, initialW=w, nobias=True)
            self.bn2 = L.BatchNormalization(mid)
            self.conv3 = L.Convolution2D(mid, out_size, 1, 1, 0, initialW=w, nobias=True)
            self.bn3 = L.BatchNormalization(out_size)
            if stride != 1 or in_size != out_size:
                self.project = L.Convolution2D(in_size, out_size, 1, stride, 0, initialW=w,
                                               nobias=True)
                self.bn_project = L.BatchNormalization(out_size)

    def __call__(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        project = getattr(self, 'project', None)
        shortcut = x if project is None else self.bn_project(project(x))
        return F.relu(h + shortcut)


class ResNet50(_Classifier):
    """ResNet-50 (bottleneck blocks 3, 4, 6, 3), 224 px."""
    insize = 224

    def __init__(self, n_classes=1000):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(3, 64, 7, 2, 3, nobias=True,
                                         initialW=chainer.initializers.HeNormal())
            self.bn1 = L.BatchNormalization(64)
            self.stages = chainer.ChainList()
            in_size = 64
            for mid, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                stage = chainer.Sequential(*[
                    _Bottleneck(in_size if i == 0 else mid * 4, mid, mid * 4,
                                stride if i == 0 else 1) for i in range(blocks)])
                self.stages.append(stage)
                in_size = mid * 4
            self.fc = L.Linear(2048, n_classes)

    def predict(self, x):
        h = F.max_pooling_2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2)
        for stage in self.stages:
            h = stage(h)
        return self.fc(F.average_pooling_2d(h, 7, stride=1))


class Tiny(_Classifier):
    """Two convolutions and a linear layer, 32 px: for many ranks on few cores."""
    insize = 32

    def __init__(self, n_classes=1000):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(3, 16, 3, stride=2, pad=1)
            self.bn1 = L.BatchNormalization(16)
            self.conv2 = L.Convolution2D(16, 32, 3, stride=2, pad=1)
            self.fc = L.Linear(32, n_classes)

    def predict(self, x):
        h = F.relu(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return self.fc(F.mean(h, axis=(2, 3)))


ARCHS = {'alex': Alex, 'nin': NIN, 'googlenetbn': GoogLeNetBN, 'resnet50': ResNet50,
         'tiny': Tiny}
