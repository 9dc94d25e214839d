"""The ImageNet-format data path: the Fashion-MNIST subset builder, list files, crops, means.

Real data: the builder's output from Debian's Fashion-MNIST (4 training and 2 validation
images per class, 40x40), built once for this module.
"""
import hashlib
import os
import pickle
import shutil
import subprocess
import sys
import warnings

import numpy
import pytest
from PIL import Image

from conftest import ROOT
from chainermn_torus.datasets.imagenet import PreprocessedDataset, compute_mean, read_list
from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR

BUILDER = os.path.join(ROOT, 'scripts', 'make_imagenet_subset.py')
COMPUTE_MEAN = os.path.join(ROOT, 'examples', 'imagenet', 'compute_mean.py')
SIZE = 40

pytestmark = pytest.mark.skipif(
    not os.path.isdir(DEFAULT_MNIST_DIR),
    reason='Debian package dataset-fashion-mnist is not installed (make setup installs it)')


def build(out, *extra):
    proc = subprocess.run([sys.executable, BUILDER, '--out', str(out), '--per-class', '4',
                           '--val-per-class', '2', '--size', str(SIZE)] + list(extra),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp('imagenet') / 'fmnist'
    build(out)
    return str(out)


def digest(root):
    h = hashlib.sha256()
    for base, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(base, name)
            h.update(os.path.relpath(path, root).encode())
            with open(path, 'rb') as f:
                h.update(f.read())
    return h.hexdigest()


# --- the builder -----------------------------------------------------------------------------

def test_builder_writes_imagenet_layout(data):
    for name in ('train.txt', 'val.txt', 'mean.npy'):
        assert os.path.isfile(os.path.join(data, name))
    train = read_list(os.path.join(data, 'train.txt'), data)
    val = read_list(os.path.join(data, 'val.txt'), data)
    assert len(train) == 40 and len(val) == 20
    assert sorted(set(label for _, label in train)) == list(range(10))
    assert [label for _, label in val].count(3) == 2
    folders = {}
    for path, label in train + val:
        # train/<class>/xxxx.JPEG: one folder per class, the same in train/ and val/
        split, cls, name = os.path.relpath(path, data).split(os.sep)
        assert split in ('train', 'val') and name.endswith('.JPEG')
        assert folders.setdefault(label, cls) == cls
    assert len(set(folders.values())) == 10
    assert folders[0] == 'tshirt_top' and folders[9] == 'ankle_boot'
    with open(os.path.join(data, 'train.txt')) as f:
        first = f.readline().split()
    assert not os.path.isabs(first[0]) and first[1] == '0'  # relative to --out


def test_builder_images_are_rgb_jpegs_of_the_size_with_distinct_channels(data):
    pairs = read_list(os.path.join(data, 'train.txt'), data)
    for path, _ in pairs[::7]:
        with Image.open(path) as img:
            assert img.format == 'JPEG' and img.mode == 'RGB' and img.size == (SIZE, SIZE)
            rgb = numpy.asarray(img, numpy.float32)
        assert rgb.max() > 50  # a garment, not a blank square
        r, g, b = rgb[..., 0].sum(), rgb[..., 1].sum(), rgb[..., 2].sum()
        assert len({round(r, -2), round(g, -2), round(b, -2)}) > 1  # tinted, not gray


def test_builder_mean_is_compute_mean_of_the_training_list(data):
    mean = numpy.load(os.path.join(data, 'mean.npy'))
    assert mean.dtype == numpy.float32 and mean.shape == (3, SIZE, SIZE)
    expected = compute_mean(read_list(os.path.join(data, 'train.txt'), data))
    numpy.testing.assert_array_equal(mean, expected)
    # and by hand: the average of the decoded JPEGs, CHW
    images = [numpy.asarray(Image.open(p), numpy.float64).transpose(2, 0, 1)
              for p, _ in read_list(os.path.join(data, 'train.txt'), data)]
    numpy.testing.assert_allclose(mean, numpy.mean(images, axis=0), rtol=1e-5, atol=1e-3)


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_compute_mean_script_matches_builder(data, tmp_path):
    out = str(tmp_path / 'mean.npy')
    proc = subprocess.run([sys.executable, COMPUTE_MEAN, os.path.join(data, 'train.txt'),
                           '--root', data, '--output', out], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    numpy.testing.assert_array_equal(numpy.load(out), numpy.load(os.path.join(data, 'mean.npy')))


@pytest.mark.slow
def test_builder_is_deterministic_and_idempotent(data, tmp_path):
    again = tmp_path / 'again'
    build(again)
    assert digest(str(again)) == digest(data)  # same seed: same files, byte for byte
    proc = build(again)
    assert 'up to date' in proc.stdout
    build(again, '--seed', '1')  # other options: rebuilt, other images
    assert digest(str(again)) != digest(data)


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_builder_refuses_a_directory_it_did_not_make(tmp_path):
    (tmp_path / 'precious.txt').write_text('keep me')
    proc = subprocess.run([sys.executable, BUILDER, '--out', str(tmp_path), '--per-class', '1',
                           '--val-per-class', '1', '--size', '8'],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and 'was not made by this script' in proc.stderr
    assert (tmp_path / 'precious.txt').read_text() == 'keep me'


# --- read_list -------------------------------------------------------------------------------

def write_list(tmp_path, text, name='list.txt'):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_read_list_skips_blank_lines_and_returns_absolute_paths(data, tmp_path):
    listed = 'train/trouser/0000.JPEG 1\n\n   \nval/bag/0001.JPEG 8\n'
    pairs = read_list(write_list(tmp_path, listed), data)
    assert pairs == [(os.path.join(data, 'train', 'trouser', '0000.JPEG'), 1),
                     (os.path.join(data, 'val', 'bag', '0001.JPEG'), 8)]


@pytest.mark.parametrize('line,message', [
    ('train/trouser/0000.JPEG', 'got 1 field'),
    ('train/trouser/0000.JPEG 1 extra', 'got 3 field'),
    ('train/trouser/0000.JPEG one', "label 'one' is not an integer"),
    ('train/trouser/0000.JPEG -1', 'label -1 is negative'),
])
def test_read_list_malformed_line_names_file_and_line(data, tmp_path, line, message):
    path = write_list(tmp_path, 'train/tshirt_top/0000.JPEG 0\n\n' + line + '\n')
    with pytest.raises(ValueError) as e:
        read_list(path, data)
    assert path in str(e.value) and 'line 3' in str(e.value) and message in str(e.value)


def test_read_list_missing_image_names_file_line_and_path(data, tmp_path):
    path = write_list(tmp_path, 'train/tshirt_top/0000.JPEG 0\ntrain/tshirt_top/9999.JPEG 0\n')
    with pytest.raises(ValueError) as e:
        read_list(path, data)
    message = str(e.value)
    assert path in message and 'line 2' in message and 'does not exist' in message
    assert os.path.join(data, 'train', 'tshirt_top', '9999.JPEG') in message
    assert len(read_list(path, data, check_exists=False)) == 2


def test_read_list_empty_list_is_an_error(tmp_path):
    path = write_list(tmp_path, '\n\n')
    with pytest.raises(ValueError, match='names no images'):
        read_list(path)


# --- PreprocessedDataset ---------------------------------------------------------------------

def dataset(data, **kwargs):
    kwargs.setdefault('mean', numpy.load(os.path.join(data, 'mean.npy')))
    kwargs.setdefault('crop_size', 32)
    return PreprocessedDataset(os.path.join(data, 'train.txt'), data, **kwargs)


def test_centre_crop_is_mean_subtracted_and_scaled(data):
    ds = dataset(data, random=False)
    mean = numpy.load(os.path.join(data, 'mean.npy'))
    image, label = ds[5]
    assert image.shape == (3, 32, 32) and image.dtype == numpy.float32
    assert label.dtype == numpy.int32 and int(label) == 1
    raw = numpy.asarray(Image.open(read_list(os.path.join(data, 'train.txt'), data)[5][0]),
                        numpy.float32).transpose(2, 0, 1)
    window = (slice(None), slice(4, 36), slice(4, 36))  # (40 - 32) / 2 = 4 on each side
    numpy.testing.assert_allclose(image, (raw[window] - mean[window]) / 255, atol=1e-6)
    numpy.testing.assert_array_equal(ds[5][0], image)  # deterministic


def test_without_mean_images_are_scaled_only(data):
    image, _ = dataset(data, mean=None, random=False, crop_size=SIZE)[0]
    assert image.shape == (3, SIZE, SIZE) and 0 <= image.min() and image.max() <= 1


def test_random_crops_are_reproducible_with_a_seeded_rng_and_vary(data):
    a = dataset(data, rng=numpy.random.RandomState(3))
    b = dataset(data, rng=numpy.random.RandomState(3))
    first = [a[2][0] for _ in range(8)]
    for x in first:
        assert x.shape == (3, 32, 32) and x.flags['C_CONTIGUOUS']
    for x, y in zip(first, [b[2][0] for _ in range(8)]):
        numpy.testing.assert_array_equal(x, y)
    assert len({x.tobytes() for x in first}) > 1  # other windows / flips


def test_random_crop_is_a_window_of_the_image_possibly_flipped(data):
    ds = dataset(data, mean=None, crop_size=36, rng=numpy.random.RandomState(0))
    full = dataset(data, mean=None, crop_size=SIZE, random=False)[7][0]
    windows = {}
    for top in range(5):
        for left in range(5):
            w = full[:, top:top + 36, left:left + 36]
            windows[w.tobytes()] = windows[w[:, :, ::-1].copy().tobytes()] = (top, left)
    for _ in range(10):
        assert ds[7][0].tobytes() in windows


def test_crops_depend_on_seed_epoch_and_image_not_on_the_process(data):
    # A pickled copy is what another rank (scatter_dataset) or a loader worker holds: with
    # the epoch told, it draws the crops the original draws, in any order of requests.
    from chainermn_torus.datasets import draws
    ds = dataset(data, seed=5)
    twin = pickle.loads(pickle.dumps(ds))
    try:
        draws.set_epoch(0)
        a = [ds[i][0].tobytes() for i in range(6)]
        b = [twin[i][0].tobytes() for i in reversed(range(6))][::-1]
        assert a == b
        assert [ds[i][0].tobytes() for i in range(6)] == a  # the same epoch: the same crops
        draws.set_epoch(1)
        later = [ds[i][0].tobytes() for i in range(6)]
        assert later != a  # another pass: other windows and flips
        other = dataset(data, seed=6)
        draws.set_epoch(0)
        assert [other[i][0].tobytes() for i in range(6)] != a  # another seed
    finally:
        draws.set_epoch(None)
    # Nobody told the epoch (Chainer's iterators): the n-th draw of an image is keyed by n.
    fresh, again = dataset(data, seed=5), dataset(data, seed=5)
    first = [fresh[3][0].tobytes() for _ in range(4)]
    assert first == [again[3][0].tobytes() for _ in range(4)] and len(set(first)) > 1


def test_crop_larger_than_images_or_mean_is_refused(data):
    with pytest.raises(ValueError, match='crop_size 48 is larger than the mean image'):
        dataset(data, crop_size=48)
    ds = dataset(data, mean=None, crop_size=48)
    with pytest.raises(ValueError, match='smaller than crop_size 48') as e:
        ds[0]
    assert '0000.JPEG' in str(e.value)


def test_mean_of_another_size_names_the_image(data):
    ds = dataset(data, mean=numpy.zeros((3, 48, 48), numpy.float32))
    with pytest.raises(ValueError, match=r'has shape \(3, 40, 40\) but the mean image has '
                                         r'shape \(3, 48, 48\)'):
        ds[0]


@pytest.fixture
def with_corrupt(data, tmp_path):
    """A list: a good image, a non-image, a truncated JPEG, a good image."""
    good = read_list(os.path.join(data, 'train.txt'), data)
    root = tmp_path / 'root'
    root.mkdir()
    shutil.copy(good[0][0], str(root / 'good0.JPEG'))
    shutil.copy(good[10][0], str(root / 'good1.JPEG'))
    (root / 'garbage.JPEG').write_bytes(b'this is not a JPEG file at all')
    with open(good[1][0], 'rb') as f:
        (root / 'truncated.JPEG').write_bytes(f.read()[:300])
    listed = 'good0.JPEG 0\ngarbage.JPEG 1\ntruncated.JPEG 2\ngood1.JPEG 3\n'
    return write_list(tmp_path, listed), str(root)


@pytest.mark.parametrize('index,name', [(1, 'garbage.JPEG'), (2, 'truncated.JPEG')])
def test_corrupt_image_error_names_the_file(with_corrupt, index, name):
    path, root = with_corrupt
    ds = PreprocessedDataset(path, root, crop_size=32, random=False)
    assert ds[0][0].shape == (3, 32, 32)
    with pytest.raises(ValueError) as e:
        ds[index]
    assert f'cannot decode image {os.path.join(root, name)}' in str(e.value)
    assert '--skip-corrupt' in str(e.value)  # the option that skips it


_UNREADABLE = '''
import os, sys
import chainermn_torus
import PIL.Image
from chainermn_torus.datasets.imagenet import PreprocessedDataset
ds = PreprocessedDataset(sys.argv[1], sys.argv[2], crop_size=32, random=False)
if os.geteuid() == 0:  # root reads anything: the read is another user's (imports done)
    os.setgid(65534)
    os.setuid(65534)
try:
    ds[1]
except ValueError as e:
    print(type(e).__name__, e)
'''


def test_an_image_that_cannot_be_read_is_named_as_such_with_the_option(data):
    # Permission denied was reported as "cannot decode", without naming --skip-corrupt.
    import subprocess
    import sys
    import tempfile
    from conftest import pythonpath
    good = read_list(os.path.join(data, 'train.txt'), data)
    root = tempfile.mkdtemp(dir='/tmp')  # a folder another user may enter
    try:
        os.chmod(root, 0o755)
        for i, name in enumerate(('good.JPEG', 'locked.JPEG')):
            shutil.copy(good[i][0], os.path.join(root, name))
            os.chmod(os.path.join(root, name), 0o644 if i == 0 else 0)
        listed = os.path.join(root, 'list.txt')
        with open(listed, 'w') as f:
            f.write('good.JPEG 0\nlocked.JPEG 1\n')
        proc = subprocess.run([sys.executable, '-c', _UNREADABLE, listed, root], cwd='/',
                              capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, PYTHONPATH=pythonpath()))
    finally:
        shutil.rmtree(root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    expected = ('UndecodableImageError cannot read image {} (Permission denied; example 1); '
                '--skip-corrupt'.format(os.path.join(root, 'locked.JPEG')))
    assert proc.stdout.startswith(expected), proc.stdout


def test_skip_corrupt_returns_next_valid_image_and_counts(with_corrupt, capsys, monkeypatch):
    monkeypatch.delenv('CHAINERMN_TORUS_QUIET', raising=False)

    path, root = with_corrupt
    ds = PreprocessedDataset(path, root, crop_size=32, random=False, skip_corrupt=True)
    reference = PreprocessedDataset(path, root, crop_size=32, random=False)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # a message reaches the user whatever the filter
        image, label = ds[1]  # garbage, truncated, then good1
    said = capsys.readouterr().err
    assert 'garbage.JPEG' in said and 'skipped (skip_corrupt=True)' in said, said
    assert int(label) == 3 and ds.skipped == 2
    numpy.testing.assert_array_equal(image, reference[3][0])
    assert int(ds[0][1]) == 0 and ds.skipped == 2  # good images do not count


def test_skip_corrupt_gives_up_when_nothing_decodes(tmp_path):
    (tmp_path / 'a.JPEG').write_bytes(b'garbage')
    ds = PreprocessedDataset(write_list(tmp_path, 'a.JPEG 0\n'), str(tmp_path), crop_size=8,
                             skip_corrupt=True)
    with pytest.raises(ValueError, match='none of the 1 images'):
        ds[0]


def test_grayscale_images_become_rgb(data, tmp_path):
    rgb_path = read_list(os.path.join(data, 'train.txt'), data)[0][0]
    Image.open(rgb_path).convert('L').save(str(tmp_path / 'gray.JPEG'), quality=95)
    ds = PreprocessedDataset(write_list(tmp_path, 'gray.JPEG 0\n'), str(tmp_path),
                             crop_size=SIZE, random=False)
    image, _ = ds[0]
    assert image.shape == (3, SIZE, SIZE)
    numpy.testing.assert_array_equal(image[0], image[1])


def test_compute_mean_of_a_dataset_and_shape_mismatch():
    images = [numpy.full((3, 2, 2), v, numpy.float32) for v in (1.0, 2.0, 6.0)]
    numpy.testing.assert_array_equal(compute_mean(images), numpy.full((3, 2, 2), 3.0))
    numpy.testing.assert_array_equal(compute_mean([(x, 0) for x in images]),
                                     numpy.full((3, 2, 2), 3.0))
    with pytest.raises(ValueError, match=r'example 1 has shape \(3, 4, 4\)'):
        compute_mean([images[0], numpy.zeros((3, 4, 4), numpy.float32)])
    with pytest.raises(ValueError, match='empty'):
        compute_mean([])


def test_an_image_larger_than_the_pixel_bound_is_refused_from_its_header(tmp_path,
                                                                         monkeypatch):
    # the bound an entry point hands down from CHAINERMN_TORUS_MAX_IMAGE_PIXELS
    # Before: a 2 MB JPEG of 13,000 x 13,000 (under Pillow's bomb limit) was decoded whole
    # and OOM-killed the loader. Here a small stand-in: 300 x 200 against a bound of 50,000.
    big = tmp_path / 'big.jpg'
    Image.new('RGB', (300, 200), (10, 20, 30)).save(str(big))
    (tmp_path / 'list.txt').write_text('big.jpg 0\n')
    ds = PreprocessedDataset(str(tmp_path / 'list.txt'), root=str(tmp_path), crop_size=8,
                             max_pixels=50000)
    decoded = []
    monkeypatch.setattr(ds.base, 'get_example', lambda i: decoded.append(i))
    with pytest.raises(ValueError) as e:
        ds[0]
    text = str(e.value)
    assert f'image {big} is 300 x 200 = 60,000 pixels by its header (example 0' in \
        text and 'more than the 50,000 an image may have; it was not decoded' in text and \
        'CHAINERMN_TORUS_MAX_IMAGE_PIXELS' in text and '--skip-corrupt' in text, text
    assert decoded == [] and ds.example_path(0) == str(big)
    monkeypatch.undo()
    assert PreprocessedDataset(str(tmp_path / 'list.txt'), root=str(tmp_path),
                               crop_size=8, max_pixels=60000)[0][0].shape == (3, 8, 8)
