#!/usr/bin/env python
"""Build a small ImageNet-format dataset from Fashion-MNIST, for the ImageNet example.

    python scripts/make_imagenet_subset.py --out data/imagenet-fmnist --per-class 30
    mpiexec -n 2 python examples/imagenet/train_imagenet.py \\
        data/imagenet-fmnist/train.txt data/imagenet-fmnist/val.txt --arch tiny

Real images from Debian's dataset-fashion-mnist (no download): ``--per-class`` training
images of each of the 10 classes from the training set and ``--val-per-class`` from the
test set, chosen with a fixed seed, each 28x28 image upscaled (PIL bicubic) to SxS, turned
into RGB with a fixed tint per class (so the three channels differ, as in photographs), and
saved as JPEG (quality 90) in ImageNet's layout::

    OUT/train/<class>/0000.JPEG ...   OUT/val/<class>/0000.JPEG ...
    OUT/train.txt, OUT/val.txt        "train/<class>/0000.JPEG <label>" per line
    OUT/mean.npy                      float32 (3, S, S), as compute_mean.py computes it

It exercises what an ImageNet run exercises on the input side (JPEG decoding, crops,
the mean image, list files); it is not a benchmark of accuracy: the per-class tint alone
tells the classes apart.

Deterministic, and idempotent: a second run with the same options finds the build up to
date (``OUT/.imagenet-subset.json`` records the options) and does nothing; other options
rebuild it. A non-empty OUT that this script did not make is refused, not overwritten.
"""
import argparse
import colorsys
import json
import os
import shutil
import sys
import time

# Not an MPI program: without this, importing chainermn_torus (which imports mpi4py.MPI)
# would initialise MPI, as a singleton, for nothing.
os.environ.setdefault('MPI4PY_RC_INITIALIZE', '0')

import numpy  # NOQA: E402
from PIL import Image  # NOQA: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run from a checkout without installing the package
from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR, read_idx  # NOQA: E402
from chainermn_torus.datasets.imagenet import compute_mean, read_list  # NOQA: E402

# Fashion-MNIST's labels 0..9, as folder names (ImageNet uses WordNet ids there).
CLASSES = ('tshirt_top', 'trouser', 'pullover', 'dress', 'coat', 'sandal', 'shirt',
           'sneaker', 'bag', 'ankle_boot')
MARKER = '.imagenet-subset.json'
FORMAT_VERSION = 1  # bump when the images this script writes change


def class_tint(label):
    """RGB gains in [0.5, 1] for a class: hues spread around the colour wheel."""
    return numpy.array(colorsys.hsv_to_rgb(label / len(CLASSES), 0.5, 1.0), numpy.float32)


def find_idx(data_dir, stem):
    for name in (stem, stem + '.gz'):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return path
    raise SystemExit(f'error: neither {data_dir}/{stem} nor {data_dir}/{stem}.gz exists; install '
                     'the Debian '
                     'package dataset-fashion-mnist or pass --data-dir')


def choose(labels, per_class, rng, split):
    """Indices of ``per_class`` images of each class, drawn without replacement, sorted."""
    chosen = []
    for label in range(len(CLASSES)):
        candidates = numpy.flatnonzero(labels == label)
        if len(candidates) < per_class:
            raise SystemExit(f'error: the {split} set has {len(candidates)} images of '
                             f'class {label} ({CLASSES[label]}), fewer than the '
                             f'{per_class} asked for')
        chosen.append(numpy.sort(rng.choice(candidates, per_class, replace=False)))
    return chosen


def write_split(out, split, images, chosen, size):
    lines = []
    for label, indices in enumerate(chosen):
        folder = os.path.join(out, split, CLASSES[label])
        os.makedirs(folder)
        tint = class_tint(label)
        for k, index in enumerate(indices):
            gray = Image.fromarray(images[index]).resize((size, size), Image.BICUBIC)
            rgb = (numpy.asarray(gray, numpy.float32)[:, :, None] * tint).round()
            relative = f'{split}/{CLASSES[label]}/{k:04d}.JPEG'
            Image.fromarray(rgb.astype(numpy.uint8), 'RGB').save(
                os.path.join(out, relative), 'JPEG', quality=90)
            lines.append(f'{relative} {label}\n')
    with open(os.path.join(out, split + '.txt'), 'w') as f:
        f.writelines(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', default='data/imagenet-fmnist',
                        help='output directory (default: %(default)s)')
    parser.add_argument('--per-class', type=int, default=30,
                        help='training images per class (default: %(default)s)')
    parser.add_argument('--val-per-class', type=int, default=10,
                        help='validation images per class (default: %(default)s)')
    parser.add_argument('--size', type=int, default=72,
                        help='side of the square images in pixels (default: %(default)s)')
    parser.add_argument('--seed', type=int, default=0,
                        help='which images are drawn (default: %(default)s)')
    parser.add_argument('--data-dir', default=DEFAULT_MNIST_DIR,
                        help='Fashion-MNIST IDX files (default: %(default)s)')
    args = parser.parse_args(argv)
    for name in ('per_class', 'val_per_class', 'size'):
        if getattr(args, name) < 1:
            parser.error('--{} must be at least 1, got {}'.format(name.replace('_', '-'),
                                                                  getattr(args, name)))

    out = os.path.abspath(args.out)
    options = {'format': FORMAT_VERSION, 'per_class': args.per_class,
               'val_per_class': args.val_per_class, 'size': args.size, 'seed': args.seed,
               'data_dir': os.path.abspath(args.data_dir)}
    marker = os.path.join(out, MARKER)
    if os.path.isdir(out) and os.listdir(out):
        if not os.path.exists(marker):
            raise SystemExit(f'error: --out {out} exists, is not empty and was not made by this '
                             f'script ({MARKER} missing); choose another directory')
        with open(marker) as f:
            previous = json.load(f)
        if previous == options and all(os.path.exists(os.path.join(out, name))
                                       for name in ('train.txt', 'val.txt', 'mean.npy')):
            print(f'{out}: up to date ({json.dumps(options)})')
            return
        # Made by us with other options: start again. Only what this script writes goes.
        os.remove(marker)  # first: an interrupted rebuild is then rebuilt, not "up to date"
        for name in ('train', 'val'):
            shutil.rmtree(os.path.join(out, name), ignore_errors=True)
        for name in ('train.txt', 'val.txt', 'mean.npy'):
            if os.path.exists(os.path.join(out, name)):
                os.remove(os.path.join(out, name))

    t0 = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    rng = numpy.random.RandomState(args.seed)
    for split, prefix, per_class in (('train', 'train', args.per_class),
                                     ('val', 't10k', args.val_per_class)):
        images = read_idx(find_idx(args.data_dir, prefix + '-images-idx3-ubyte'))
        labels = read_idx(find_idx(args.data_dir, prefix + '-labels-idx1-ubyte'))
        chosen = choose(labels, per_class, rng, split)
        write_split(out, split, images, chosen, args.size)

    # The same function compute_mean.py calls, on the list just written.
    mean = compute_mean(read_list(os.path.join(out, 'train.txt'), out))
    numpy.save(os.path.join(out, 'mean.npy'), mean)
    with open(marker, 'w') as f:  # last: its presence means the build is complete
        json.dump(options, f, indent=2, sort_keys=True)
    print(f'{out}: {args.per_class * len(CLASSES)} training '
          f'and {args.val_per_class * len(CLASSES)} validation images of {args.size}x{args.size} '
          f'in {len(CLASSES)} classes, mean.npy {mean.shape} '
          f'({time.perf_counter() - t0:.1f} s)')


if __name__ == '__main__':
    main()
