"""ImageNet-format data for the ImageNet example: list files, crops, the mean image.

The format is the one of Chainer's ``LabeledImageDataset`` (and Caffe's): a text file with
one ``relative/path/to/image.JPEG label`` per line, paths relative to a root directory, and
a ``mean.npy`` holding the mean training image in CHW order (``compute_mean``).

``PreprocessedDataset`` does what ChainerMN's ImageNet example does to each image: crop
(random crop + random horizontal flip for training, centre crop otherwise), subtract the
mean over the same window, scale by 1/255. What it adds: errors that name the file (a list
line that cannot be parsed, an image that is missing or cannot be decoded), optional
skipping of undecodable images, grayscale/CMYK images turned into RGB, and random crops that
differ between loader worker processes.
"""
import os
import struct
import sys

import chainer
import numpy

from chainermn_torus import settings_table
from chainermn_torus.datasets import draws
from chainermn_torus.errors import ConfigError, DataError
from chainermn_torus.runtime import report

__all__ = ['read_list', 'PreprocessedDataset', 'compute_mean', 'load_rgb']


def read_list(path, root='.', check_exists=True):
    """Parse a LabeledImageDataset list file; returns ``[(absolute image path, int label)]``.

    Each non-empty line must be exactly ``<path> <label>`` (whitespace-separated, so paths
    cannot contain spaces, as in Chainer's own parser) with a non-negative integer label;
    paths are relative to ``root``. Raises ValueError naming the list file and the line
    number for a malformed line or (with ``check_exists``) an image file that does not
    exist, so a typo in line 812,345 of an ImageNet list is found before training starts.
    """
    pairs = []
    with open(path, encoding='utf-8') as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue  # blank lines (a trailing newline, say) are harmless
            if len(fields) != 2:
                raise DataError(
                    '{}: line {}: expected "<image path> <integer label>" (two fields '
                    'separated by whitespace; paths cannot contain spaces), got {} field(s): '
                    '{!r}'.format(path, lineno, len(fields), line.rstrip('\n')))
            relative, label_text = fields
            try:
                label = int(label_text)
            except ValueError:
                raise DataError('{}: line {}: label {!r} is not an integer (line: {!r})'.format(
                    path, lineno, label_text, line.rstrip('\n'))) from None
            if label < 0:
                raise DataError(f'{path}: line {lineno}: label {label} is negative; labels are '
                                'class indices '
                                '0, 1, 2, ...')
            full = os.path.abspath(os.path.join(root, relative))
            if check_exists and not os.path.isfile(full):
                raise DataError(f'{path}: line {lineno}: image file {full} does not exist '
                                f'({relative!r} relative to '
                                f'root {root!r})')
            pairs.append((full, label))
    if not pairs:
        raise DataError(f'{path}: the list file names no images')
    return pairs


class UndecodableImageError(DataError):
    """An image file exists but cannot be read (permissions, a directory, an I/O error) or
    PIL cannot decode it (corrupt, truncated, not an image): what ``skip_corrupt`` skips."""


# Said with every such error: the option of the examples and the keyword that skip them.
SKIP_HINT = '--skip-corrupt (PreprocessedDataset(skip_corrupt=True)) skips such images'


# What PIL raises for a bad file, depending on the format plugin and where decoding stops:
# UnidentifiedImageError / "image file is truncated" (OSError), SyntaxError, struct.error,
# EOFError, ValueError, and DecompressionBombError (an Exception subclass of its own).
def _pil_errors():
    from PIL import Image
    return (OSError, SyntaxError, ValueError, EOFError, struct.error,
            Image.DecompressionBombError)


def _read_rgb_with_pil(path):
    # Only for the rare images that are not 3-channel (ImageNet has grayscale and CMYK
    # JPEGs): PIL's convert gives RGB values where LabeledImageDataset would hand over CMYK.
    from PIL import Image
    with Image.open(path) as img:
        rgb = numpy.asarray(img.convert('RGB'), dtype=numpy.float32)
    return rgb.transpose(2, 0, 1)


def _pixels(path):
    """(width, height) from the image's header: nothing is decoded."""
    from PIL import Image
    with Image.open(path) as img:
        return img.size


def load_rgb(base, index, path, max_pixels=None):
    """Example ``index`` of a LabeledImageDataset as (float32 RGB CHW image, label, path).

    ``path`` is that example's file (for messages and the RGB conversion). Raises
    ValueError if the file is missing and UndecodableImageError (a ValueError) naming the
    file and the option that skips it if it cannot be read or decoded, or if its header
    says more than ``max_pixels`` pixels (checked before decoding).
    """
    try:
        if max_pixels is not None:
            width, height = _pixels(path)
            if width * height > max_pixels:
                raise UndecodableImageError(
                    'image {} is {} x {} = {:,} pixels by its header (example {}; {:,} '
                    'bytes as float32 RGB), more than the {:,} an image may have; it was not '
                    'decoded. Resize it, raise {}, or: {}'.format(
                        path, width, height, width * height, index, width * height * 12,
                        max_pixels, settings_table.SETTINGS['max_image_pixels'].env, SKIP_HINT))
        image, label = base[index]
        if image.shape[0] != 3:
            image = _read_rgb_with_pil(path)
    except FileNotFoundError:
        raise DataError(f'image file {path} does not exist (example {index})') \
            from None
    except (PermissionError, IsADirectoryError, NotADirectoryError) as e:
        # Not a decoding problem: the file is there and cannot be opened (it was reported
        # as "cannot decode").
        raise UndecodableImageError(f'cannot read image {path} ({e.strerror or type(e).__name__}; '
                                    f'example {index}); {SKIP_HINT}') from None
    except _pil_errors() as e:
        raise UndecodableImageError(f'cannot decode image {path} ({type(e).__name__}: {e}; '
                                    f'example {index}); {SKIP_HINT}') from None
    return image, label, path


class PreprocessedDataset(chainer.dataset.DatasetMixin):
    """(image, label) pairs cropped and normalised as in ChainerMN's ImageNet example.

    Args:
        pairs: a list of (path, label) (``read_list``'s result) or the path of a list file.
        root: directory the list's paths are relative to.
        mean: float32 CHW mean image (``compute_mean``) or None for no mean subtraction.
            Images must have the mean's height and width (the crop window is taken from
            both), as ChainerMN's example assumes images resized beforehand.
        crop_size: side of the square crop.
        random: True (training): a random crop and a random horizontal flip; False: the
            centre crop, deterministic.
        rng: a numpy.random.RandomState the dataset's seed is drawn from (pass a seeded
            one, or ``seed``, for reproducible crops); neither: a seed from the operating
            system's entropy.
        seed: the crops' and flips' seed. Each draw's random state is a function of the
            seed, the example's index and the epoch (``datasets.draws``): the same crops on
            every rank count, in loader workers and after a resume, so runs with the same
            seed are bit-identical at any P (our loader and the example tell workers the
            epoch; Chainer's iterators leave the count of draws per example instead).
        skip_corrupt: False (default): an image that cannot be read or decoded raises
            ValueError naming the file. True: a warning names it and the next valid image (index +
            1, + 2, ... wrapping around) is returned instead; ``skipped`` counts these skips.
            The count is per process: skips that happen inside loader worker processes
            increase the workers' copies, not this object.
        max_pixels: the most pixels an image may have by its header (the entry point's
            ``CHAINERMN_TORUS_MAX_IMAGE_PIXELS``, handed down; None: the table's default).

    Returns per example ``(image, label)``: float32 (3, crop_size, crop_size)
    ``(crop - mean_crop) / 255`` and int32.
    """

    def __init__(self, pairs, root='.', mean=None, crop_size=224, random=True, rng=None,
                 skip_corrupt=False, seed=None, max_pixels=None):
        if isinstance(pairs, str):
            pairs = read_list(pairs, root)
        crop_size = int(crop_size)
        if crop_size < 1:
            raise ConfigError(f'crop_size must be a positive number of pixels, got {crop_size}')
        if mean is not None:
            mean = numpy.asarray(mean, dtype=numpy.float32)
            if mean.ndim != 3 or mean.shape[0] != 3:
                raise ConfigError('mean must be a (3, height, width) CHW image, got shape '
                                  f'{mean.shape}')
            if min(mean.shape[1:]) < crop_size:
                raise ConfigError(f'crop_size {crop_size} is larger than the mean image '
                                  f'({mean.shape[1]}x{mean.shape[2]}): images '
                                  f'of that size cannot be cropped to {crop_size}')
        self.base = chainer.datasets.LabeledImageDataset(pairs, root)
        self._paths = [os.path.join(root, p) for p, _ in pairs]
        self.mean = mean
        self.crop_size = crop_size
        self.random = bool(random)
        self.skip_corrupt = bool(skip_corrupt)
        self.skipped = 0
        if seed is None:
            seed = int((rng or numpy.random.RandomState()).randint(0, 2 ** 31))
        self.seed = int(seed)
        self._draws = draws.Counter()
        # The entry point's setting (CHAINERMN_TORUS_MAX_IMAGE_PIXELS), else the table's.
        self.max_pixels = settings_table.SETTINGS['max_image_pixels'].default \
            if max_pixels is None else settings_table.parse('count', max_pixels,
                                                            'max_pixels')

    def __len__(self):
        return len(self.base)

    def example_path(self, i):
        """The file of example ``i`` (what a loader's death names)."""
        return self._paths[i]


    def get_example(self, i):
        n = len(self.base)
        for attempt in range(n):
            j = (i + attempt) % n
            try:
                image, label, path = load_rgb(self.base, j, self._paths[j], self.max_pixels)
            except UndecodableImageError as e:
                if not self.skip_corrupt:
                    raise
                self.skipped += 1
                # A message, not a warning: a user who silences warnings still hears of it.
                report.say(f'{e}; skipped (skip_corrupt=True), using the next image',
                           rank=0, stream=sys.stderr)
                continue
            return self._crop(image, path, j), numpy.int32(label)
        raise DataError(f'none of the {n} images of the dataset can be decoded')

    def _crop(self, image, path, index):
        _, h, w = image.shape
        size = self.crop_size
        if h < size or w < size:
            raise DataError(f'image {path} is {h}x{w}, smaller than crop_size {size}')
        if self.mean is not None and image.shape != self.mean.shape:
            raise DataError(f'image {path} has shape {image.shape} but the mean image has '
                            f'shape {self.mean.shape}: images '
                            'must be resized to the size the mean was computed at')
        if self.random:
            rng = draws.random_state(self.seed, index, self._draws)
            top = rng.randint(0, h - size + 1)
            left = rng.randint(0, w - size + 1)
            flip = rng.randint(0, 2) == 1
        else:
            top, left, flip = (h - size) // 2, (w - size) // 2, False
        crop = image[:, top:top + size, left:left + size]
        if self.mean is not None:
            # the mean over the same window, before flipping: pixel for pixel
            crop = crop - self.mean[:, top:top + size, left:left + size]
        if flip:
            crop = crop[:, :, ::-1]
        # contiguous, so a loader can copy it into shared memory in one piece
        return numpy.ascontiguousarray(crop * numpy.float32(1.0 / 255.0), dtype=numpy.float32)


def compute_mean(source, root='.', report=None):
    """The mean image (float32 CHW) of a list file, of ``read_list`` pairs or of a dataset.

    ``source``: a list file path (read with ``root``), a list of (path, label) pairs (images
    read as ``PreprocessedDataset`` reads them: RGB, CHW, 0..255), or any dataset whose
    examples are images or (image, ...) tuples. Sums in float64, so the mean of a million
    images is not off by float32 rounding. ``report(done, total)``, if given, is called
    every 1000 images and at the end. All images must have the same shape.
    """
    if isinstance(source, str):
        source = read_list(source, root)
    if isinstance(source, (list, tuple)) and source and isinstance(source[0], tuple) \
            and len(source[0]) == 2 and isinstance(source[0][0], str):
        base = chainer.datasets.LabeledImageDataset(list(source), root)
        paths = [os.path.join(root, p) for p, _ in source]

        def get(i):
            image, _, path = load_rgb(base, i, paths[i])
            return image, path
        n = len(base)
    else:
        def get(i):
            item = source[i]
            return (item[0] if isinstance(item, tuple) else item), f'example {i}'
        n = len(source)
    if n == 0:
        raise DataError('cannot compute the mean of an empty dataset')
    total = None
    for i in range(n):
        image, where = get(i)
        image = numpy.asarray(image, dtype=numpy.float64)
        if total is None:
            total, first = numpy.zeros_like(image), where
        elif image.shape != total.shape:
            raise DataError(f'{where} has shape {image.shape} but {first} has shape {total.shape}: '
                            'the mean needs images of '
                            'one size (resize them first)')
        total += image
        if report is not None and ((i + 1) % 1000 == 0 or i + 1 == n):
            report(i + 1, n)
    return (total / n).astype(numpy.float32)
