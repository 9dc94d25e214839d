"""Datasets for the loader tests: importable by spawned loader processes (tests/ is on sys.path)."""
import numpy


class Squares:
    """Example i: (an image-like array filled with i, the label i)."""

    def __init__(self, n, shape=(3, 4, 4)):
        self.n, self.shape = n, shape

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return numpy.full(self.shape, i, numpy.float32), numpy.int32(i)


class Failing(Squares):
    def __getitem__(self, i):
        if i == 7:
            raise ValueError('bad example 7 (raised on purpose)')
        return super().__getitem__(i)


class Ragged(Squares):
    def __getitem__(self, i):
        return numpy.zeros((3, 4 + (i == 5), 4), numpy.float32), numpy.int32(i)


class Slow(Squares):
    def __getitem__(self, i):
        import time
        time.sleep(0.05)
        return super().__getitem__(i)


class Big:
    """Examples of ``nbytes`` bytes each (only the first is ever read: to size the slots)."""

    def __init__(self, nbytes, n=10):
        self.nbytes, self.n = nbytes, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return numpy.zeros(self.nbytes, numpy.uint8), numpy.int32(i)


class Stuck(Squares):
    """Example 13 never finishes loading (as a decoder filling memory until the OOM killer
    comes); ``example_path`` names each example's file, as PreprocessedDataset's does."""

    def __getitem__(self, i):
        if i == 13:
            import time
            time.sleep(120)
        return super().__getitem__(i)

    def example_path(self, i):
        return f'/data/train/image{i}.JPEG'
