import gzip
import os
import re

import numpy
import pytest

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR, load_mnist_idx, read_idx
from chainermn_torus.errors import DataError


def write_idx(path, array):
    codes = {numpy.dtype('uint8'): 0x08, numpy.dtype('int8'): 0x09,
             numpy.dtype('>f4'): 0x0D}
    header = bytes([0, 0, codes[array.dtype], array.ndim])
    header += numpy.array(array.shape, dtype='>u4').tobytes()
    data = header + array.tobytes()
    with (gzip.open if path.endswith('.gz') else open)(path, 'wb') as f:
        f.write(data)


def make_dir(tmp_path, n=12, gz=False):
    rng = numpy.random.RandomState(0)
    ext = '.gz' if gz else ''
    for prefix in ('train', 't10k'):
        write_idx(str(tmp_path / (prefix + '-images-idx3-ubyte' + ext)),
                  rng.randint(0, 256, (n, 28, 28)).astype(numpy.uint8))
        write_idx(str(tmp_path / (prefix + '-labels-idx1-ubyte' + ext)),
                  rng.randint(0, 10, n).astype(numpy.uint8))
    return str(tmp_path)


@pytest.mark.parametrize('gz', [False, True])
def test_reads_idx_directories_like_get_mnist(tmp_path, gz):
    train, test = load_mnist_idx(make_dir(tmp_path, gz=gz))
    x, t = train[0]
    assert len(train) == 12 and len(test) == 12
    assert x.shape == (784,) and x.dtype == numpy.float32 and 0 <= x.min() <= x.max() <= 1
    assert t.dtype == numpy.int32 and 0 <= t < 10
    x3, _ = load_mnist_idx(make_dir(tmp_path, gz=gz), ndim=3)[0][0]
    assert x3.shape == (1, 28, 28)


def test_limit_gives_what_slicing_the_whole_gives_and_still_checks_every_label(tmp_path):
    data = make_dir(tmp_path)
    whole = load_mnist_idx(data, ndim=3)
    for split, short in zip(whole, load_mnist_idx(data, ndim=3, limit=5)):
        assert len(short) == 5
        for (x, t), (y, u) in zip(split[:5], short):
            assert x.tobytes() == y.tobytes() and t == u and y.dtype == numpy.float32
    assert [len(s) for s in load_mnist_idx(data, limit=100)] == [12, 12]  # fewer there
    labels = str(tmp_path / 't10k-labels-idx1-ubyte')
    write_idx(labels, numpy.array([0] * 11 + [10], numpy.uint8))  # past the limit
    with pytest.raises(DataError) as e:
        load_mnist_idx(data, n_classes=10, limit=5)
    assert 'label 10 at index 11' in str(e.value)
    for bad in (0, -1, 2.5, True, '5'):
        with pytest.raises(ValueError) as e:
            load_mnist_idx(data, limit=bad)
        assert 'limit must be an integer >= 1' in str(e.value) and repr(bad) in str(e.value)


def test_missing_directory_says_which_path_and_how_to_get_data(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        load_mnist_idx(str(tmp_path / 'nowhere'))
    assert 'nowhere' in str(e.value) and 'dataset-fashion-mnist' in str(e.value)


def test_missing_file_is_named(tmp_path):
    make_dir(tmp_path)
    os.remove(str(tmp_path / 't10k-labels-idx1-ubyte'))
    with pytest.raises(FileNotFoundError, match='t10k-labels-idx1-ubyte'):
        load_mnist_idx(str(tmp_path))


def test_corrupt_file_is_reported(tmp_path):
    path = str(tmp_path / 'bad')
    with open(path, 'wb') as f:
        f.write(b'\x00\x00\x08\x03\x00\x00\x00\x05' + b'\x00' * 8 + b'abc')
    with pytest.raises(ValueError, match='header says shape'):
        read_idx(path)
    with open(path, 'wb') as f:
        f.write(b'PK\x03\x04')
    with pytest.raises(ValueError, match='not an IDX file'):
        read_idx(path)


@pytest.mark.parametrize('data, message', [
    # numpy said "buffer size must be a multiple of element size" and "buffer is smaller
    # than requested size", naming no file (issue 34).
    (b'\x00\x00\x0B\x01\x00\x00\x00\x03' + b'\x01' * 5,
     r'header says shape \(3,\) \(3 values of 2 byte\(s\): 6 bytes\) but the file holds 5 bytes'),
    (b'\x00\x00\x08\x03\x00\x00', r'truncated IDX header: 3 dimension\(s\) need 16 bytes'),
], ids=['odd-body', 'short-header'])
def test_every_malformed_file_names_itself(tmp_path, data, message):
    path = str(tmp_path / 'labels-idx1-ubyte')
    with open(path, 'wb') as f:
        f.write(data)
    with pytest.raises(DataError, match=re.escape(path) + ': ' + message):
        read_idx(path)


def test_truncated_gzip_names_the_file(tmp_path):
    make_dir(tmp_path, gz=True)
    path = tmp_path / 'train-images-idx3-ubyte.gz'
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match='train-images-idx3-ubyte.gz: truncated or corrupt gzip'):
        load_mnist_idx(str(tmp_path))


@pytest.mark.parametrize('images, message', [
    (numpy.zeros((0, 28, 28), numpy.uint8), r'non-empty 3-D array .* shape \(0, 28, 28\)'),
    (numpy.zeros((12, 784), numpy.uint8), r'non-empty 3-D array .* shape \(12, 784\)'),
], ids=['no-images', 'two-dimensional'])
def test_images_of_the_wrong_shape_name_the_file(tmp_path, images, message):
    make_dir(tmp_path)
    write_idx(str(tmp_path / 'train-images-idx3-ubyte'), images)
    with pytest.raises(ValueError, match='train-images-idx3-ubyte: images must be a ' + message):
        load_mnist_idx(str(tmp_path))


@pytest.mark.parametrize('dtype, code', [('int8', '0x09 (int8)'), ('>f4', '0x0D (float32)')])
def test_images_that_are_not_unsigned_bytes_are_refused(tmp_path, dtype, code):
    # Read without complaint before, scaled by 1/255 as if unsigned: trained to chance.
    make_dir(tmp_path)
    path = str(tmp_path / 'train-images-idx3-ubyte')
    write_idx(path, numpy.zeros((12, 28, 28), dtype))
    with pytest.raises(ValueError) as e:
        load_mnist_idx(str(tmp_path))
    assert path in str(e.value) and 'unsigned bytes (IDX type 0x08' in str(e.value)
    assert 'IDX type ' + code in str(e.value), str(e.value)


def test_labels_outside_the_classes_name_the_file_and_index(tmp_path):
    make_dir(tmp_path)
    labels = numpy.arange(12, dtype=numpy.uint8) % 10
    labels[7] = 58
    write_idx(str(tmp_path / 't10k-labels-idx1-ubyte'), labels)
    load_mnist_idx(str(tmp_path))  # no class count given: nothing to check against
    with pytest.raises(ValueError, match=r't10k-labels-idx1-ubyte: label 58 at index 7 is '
                                         r'outside 0\.\.9 \(1 such label'):
        load_mnist_idx(str(tmp_path), n_classes=10)


@pytest.mark.skipif(not os.path.isdir(DEFAULT_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist is not installed '
                           '(make setup installs it)')
def test_real_fashion_mnist():
    train, test = load_mnist_idx()
    assert len(train) == 60000 and len(test) == 10000
    labels = numpy.array([test[i][1] for i in range(len(test))])
    assert numpy.bincount(labels).tolist() == [1000] * 10
