"""PyTorch's side of ``bench compute``: the same ResNet-50 in torch, timed on request.

    PYTHON_WITH_TORCH torch_resnet50.py BATCH SIZE THREADS     (started by bench.compute)

Run by a Python that has torch (a venv of its own: ``pip install "torch==2.13.0+cpu"``, the
CPU build, whose convolutions, batch normalization and ReLU are oneDNN's); it imports
nothing of this package. The network is Chainer's ``ResNet50Layers``, layer for layer: the
stride of each stage's first block on its first 1 x 1 convolution (MSRA's original, as
Chainer builds it; torchvision's puts it on the 3 x 3), batch normalization after every
convolution, the same channel counts. One iteration per line on stdin ("run"): forward,
softmax cross entropy, backward; the seconds it took on stdout; "run bf16" runs the forward
under ``torch.autocast('cpu', dtype=torch.bfloat16)``. "quit" ends it.
"""
import sys
import time

import numpy
import torch
from torch import nn


class Bottleneck(nn.Module):
    def __init__(self, cin, mid, cout, stride, project):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, mid, 1, stride, 0, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, cout, 1, 1, 0, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False),
                                  nn.BatchNorm2d(cout)) if project else None

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = torch.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return torch.relu(h + (self.proj(x) if self.proj is not None else x))


def resnet50():
    layers = [nn.Conv2d(3, 64, 7, 2, 3), nn.BatchNorm2d(64), nn.ReLU(),
              nn.MaxPool2d(3, 2)]
    cin = 64
    for blocks, mid, cout, stride in ((3, 64, 256, 1), (4, 128, 512, 2), (6, 256, 1024, 2),
                                      (3, 512, 2048, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, mid, cout, stride if i == 0 else 1, i == 0))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def main():
    batch, size, threads = (int(a) for a in sys.argv[1:4])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = resnet50()
    rng = numpy.random.RandomState(0)
    x = torch.from_numpy(rng.uniform(-1, 1, (batch, 3, size, size)).astype(numpy.float32))
    t = torch.from_numpy(rng.randint(0, 1000, batch).astype(numpy.int64))
    loss_fn = nn.CrossEntropyLoss()
    print(f'ready torch {torch.__version__} {torch.get_num_threads()} threads',
          flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] != 'run':
            break
        amp = words[1:] == ['bf16']  # autocast bfloat16, as a PyTorch user turns it on
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(model(x), t)
        loss.backward()
        print(time.perf_counter() - t0, flush=True)


if __name__ == '__main__':
    main()
