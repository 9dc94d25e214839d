"""MNIST-format (IDX) datasets from a directory, such as Debian's dataset-fashion-mnist.

Reads train-images-idx3-ubyte / train-labels-idx1-ubyte / t10k-* (optionally .gz) and
returns Chainer TupleDatasets shaped like ``chainer.datasets.get_mnist`` (float32 in [0, 1],
int32 labels), without downloading anything.
"""
import gzip
import os
import zlib

import numpy
from chainer.datasets import TupleDataset
from chainermn_torus.errors import DataError, Refusal

__all__ = ['DEFAULT_MNIST_DIR', 'load_mnist_idx', 'read_idx', 'write_chainer_cache', 'MissingData']

DEFAULT_MNIST_DIR = '/usr/share/datasets/fashion-mnist'

class MissingData(Refusal, FileNotFoundError):
    """The data directory or one of its files is not there (the path and the fix named)."""


_DTYPES = {0x08: numpy.uint8, 0x09: numpy.int8, 0x0B: '>i2', 0x0C: '>i4', 0x0D: '>f4',
           0x0E: '>f8'}
_CODES = {numpy.dtype(d).str: code for code, d in _DTYPES.items()}


def read_idx(path):
    """One IDX file as a numpy array (the format of LeCun's MNIST files)."""
    opener = gzip.open if path.endswith('.gz') else open
    try:
        with opener(path, 'rb') as f:
            data = f.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise DataError('{}: truncated or corrupt gzip file ({}: {}); download or install it '
                        'again'.format(path, type(e).__name__, e or 'ends early')) from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _DTYPES:
        raise DataError(f'{path}: not an IDX file (bad magic number {data[:4]!r})')
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f'{path}: truncated IDX header: {ndim} dimension(s) need {header} bytes of '
                        'header, '
                        f'the file has {len(data)} bytes')
    dims = numpy.frombuffer(data, '>u4', ndim, 4).astype(numpy.int64)
    dtype = numpy.dtype(_DTYPES[data[2]])
    values = int(numpy.prod(dims))
    # Checked before numpy reads it: its own errors ("buffer size must be a multiple of
    # element size") name neither the file nor the shape.
    if len(data) - header != values * dtype.itemsize:
        raise DataError(f'{path}: header says shape {tuple(dims)} ({values} values '
                        f'of {dtype.itemsize} byte(s): {values * dtype.itemsize} bytes) but '
                        f'the file holds {len(data) - header} bytes after the header (truncated or '
                        'not this '
                        'format)')
    return numpy.frombuffer(data, dtype, offset=header).reshape(tuple(dims))


def _find(data_dir, stem):
    for name in (stem, stem + '.gz'):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return path
    raise MissingData(
        f'MNIST-format data not found: neither {data_dir}/{stem} nor {data_dir}/{stem}.gz exists. '
        'Install it with '
        f'`apt-get install dataset-fashion-mnist` (files land in {DEFAULT_MNIST_DIR}) or pass '
        '--data-dir '
        'pointing at a directory with train-images-idx3-ubyte, train-labels-idx1-ubyte, '
        't10k-images-idx3-ubyte and t10k-labels-idx1-ubyte.')


def load_mnist_idx(data_dir=DEFAULT_MNIST_DIR, ndim=1, scale=1.0, n_classes=None, limit=None):
    """(train, test) TupleDatasets of (image, label) from an MNIST-format directory.

    With ``n_classes`` every label must lie in 0..n_classes-1 (checked here, with the file
    named, rather than as an IndexError in the middle of training). With ``limit``, the first
    ``limit`` examples of each split, as slicing the whole would give; the files are still
    read and checked whole, only the float32 copy is that short (60,000 images in float32 are
    188 MB, whose first touch costs a fresh process about 0.3 s)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError('limit must be an integer >= 1 (or None: every example), got '
                         f'{limit!r}')
    if not os.path.isdir(data_dir):
        raise MissingData(
            f'MNIST data directory {data_dir!r} does not exist. Install the Debian package '
            'dataset-fashion-mnist (`apt-get install dataset-fashion-mnist`, data '
            f'in {DEFAULT_MNIST_DIR}) or '
            'pass --data-dir DIR with MNIST-format IDX files.')

    def load(prefix):
        image_file = _find(data_dir, prefix + '-images-idx3-ubyte')
        label_file = _find(data_dir, prefix + '-labels-idx1-ubyte')
        images, labels = read_idx(image_file), read_idx(label_file)
        if images.dtype != numpy.uint8:
            # Pixels are scaled by 1/255 as unsigned bytes; signed or wider values would be
            # read without error and train to chance (seen with an int8 file).
            raise DataError(f'{image_file}: MNIST images must be unsigned bytes (IDX type 0x08, '
                            'pixel '
                            'values 0..255); the file holds IDX type '
                            f'0x{_CODES[images.dtype.str]:02X} ({images.dtype.name})')
        if labels.dtype.kind not in 'iu':
            raise DataError(f'{label_file}: labels must be integers (IDX type 0x08, 0x09, 0x0B or '
                            '0x0C); '
                            f'the file holds IDX type 0x{_CODES[labels.dtype.str]:02X} '
                            f'({labels.dtype.name})')
        if images.ndim != 3 or len(images) == 0:
            raise DataError(f'{image_file}: images must be a non-empty 3-D array (count, rows, '
                            'columns), '
                            f'the file holds shape {images.shape}')
        if labels.ndim != 1:
            raise DataError(f'{label_file}: labels must be a 1-D array, the file holds '
                            f'shape {labels.shape}')
        if len(images) != len(labels):
            raise DataError(f'{data_dir}: {len(images)} images but {len(labels)} labels')
        if n_classes is not None:
            bad = numpy.flatnonzero((labels < 0) | (labels >= n_classes))
            if bad.size:
                raise DataError(f'{label_file}: label {int(labels[bad[0]])} at index {int(bad[0])} '
                                f'is outside 0..{n_classes - 1} ({bad.size} such '
                                'label(s))')
        images, labels = images[:limit], labels[:limit]
        x = images.astype(numpy.float32) * (scale / 255.0)
        if ndim == 1:
            x = x.reshape(len(x), -1)
        elif ndim == 3:
            x = x.reshape(len(x), 1, *images.shape[1:])
        return TupleDataset(x, labels.astype(numpy.int32))

    return load('train'), load('t10k')


def write_chainer_cache(root, data_dir=DEFAULT_MNIST_DIR):
    """Fill Chainer's dataset cache so that ``chainer.datasets.get_mnist()`` reads the IDX
    files of ``data_dir`` instead of downloading: compute nodes usually have no internet.

    Writes ``ROOT/pfnet/chainer/mnist/{train,test}.npz`` in the format Chainer's own download
    makes (x: uint8 images, one row per image; y: uint8 labels); point Chainer at it with
    ``CHAINER_DATASET_ROOT=ROOT``. Returns the directory.
    """
    target = os.path.join(root, 'pfnet', 'chainer', 'mnist')
    os.makedirs(target, exist_ok=True)
    for prefix, name in (('train', 'train.npz'), ('t10k', 'test.npz')):
        x = read_idx(_find(data_dir, prefix + '-images-idx3-ubyte'))
        y = read_idx(_find(data_dir, prefix + '-labels-idx1-ubyte'))
        numpy.savez_compressed(os.path.join(target, name), x=x.reshape(len(x), -1),
                               y=y.astype(numpy.uint8))
    return target
