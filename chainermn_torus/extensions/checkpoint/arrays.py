"""A rank file's arrays, stored and read without pickle: a checkpoint never runs code.

numpy stores an object array by pickling it, and unpickling runs whatever the file says:
Chainer's ``load_npz`` reads with ``allow_pickle=True``, so a crafted rank file in a
checkpoint directory ran commands as the job's user on every rank that resumed. Chainer's
serializer writes one object array of its own, ``numpy.asarray(None)`` for a value that is
None. Here a None is stored as its name in ``NONE_KEYS`` (a string array) instead, and
``RankFile`` reads every array with ``allow_pickle=False``; it also reads the object arrays
of None that earlier checkpoints hold, by comparing their bytes with numpy's own (nothing
unpickled). Any other object array is refused in one line, on writing and on reading.
"""
import io
import os

import chainer
import numpy

from chainermn_torus.errors import Refusal
from chainermn_torus.runtime.files import shared_paths

__all__ = ['CheckpointError', 'NONE_KEYS', 'for_saving', 'RankFile', 'load_npz']


class CheckpointError(Refusal, RuntimeError):
    """A checkpoint that cannot be written or resumed (said in one line)."""

NONE_KEYS = 'chainermn_torus/none_values'


def _none_bytes():
    out = io.BytesIO()
    numpy.save(out, numpy.asarray(None), allow_pickle=True)
    return out.getvalue()


_NONE_NPY = _none_bytes()


def for_saving(arrays):
    """``arrays`` (a serializer's target) with its None values as names in ``NONE_KEYS``;
    another object array refused (it could be read back only by unpickling)."""
    out, nones = {}, []
    for key, value in arrays.items():
        a = numpy.asarray(value)
        if a.dtype == object:
            if a.shape == () and a[()] is None:
                nones.append(key)
                continue
            raise CheckpointError(
                'chainermn_torus: cannot checkpoint {!r}: it is an object array ({} of {}), '
                'which only pickle can store, and a checkpoint holds numbers and strings '
                'only (pickle runs code when it is read). Serialize it as a numeric or '
                'string array.'.format(key, a.shape, type(a.flat[0]).__name__ if a.size
                                       else 'nothing'))
        out[key] = value
    out[NONE_KEYS] = numpy.array(nones, dtype=str)
    return out


class RankFile:
    """A rank file's arrays, read-only, as Chainer's ``NpzDeserializer`` reads an npz (by
    name, ``in``), with every read ``allow_pickle=False``. A context manager."""

    def __init__(self, path, name=None):
        """``path``: a file's path (opened without following a link: the rule for shared
        paths), or an open binary file (``name``: its path, for messages)."""
        self._own = None
        if isinstance(path, str):
            self._own = os.fdopen(shared_paths.open_file(path, 'the checkpoint file',
                                                         trusted=True), 'rb')
        self.path = path if isinstance(path, str) else (name or getattr(path, 'name', '?'))
        try:
            self._z = numpy.load(self._own or path, allow_pickle=False)
        except BaseException:
            self._close_own()
            raise
        try:
            self._nones = set(self._z[NONE_KEYS].tolist()) if NONE_KEYS in self._z.files \
                else set()
        except ValueError as e:
            self.close()
            raise self._refusal(NONE_KEYS) from e
        self.files = [k for k in self._z.files if k != NONE_KEYS] + sorted(self._nones)

    def _refusal(self, key):
        return CheckpointError(
            f'chainermn_torus: {self.path} holds an object array ({key!r}): reading it would '
            'unpickle it, '
            'and pickle runs code; chainermn_torus never does. Neither chainermn_torus nor '
            "Chainer's snapshots write one: the file was altered or made elsewhere; do not "
            'resume from it.')

    def __contains__(self, key):
        return key in self._nones or key in self._z.files

    def __getitem__(self, key):
        if key in self._nones:
            return numpy.asarray(None)
        try:
            return self._z[key]
        except ValueError as e:
            if 'allow_pickle' not in str(e):
                raise  # damaged, not an object array
            if self._z.zip.read(key + '.npy') == _NONE_NPY:
                return numpy.asarray(None)  # Chainer's None, byte for byte
            raise self._refusal(key) from e

    def close(self):
        self._z.close()
        self._close_own()

    def _close_own(self):
        if self._own is not None:
            self._own.close()
            self._own = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def load_npz(path, target, ignore_names=None):
    """Chainer's ``serializers.load_npz(path, target)``, reading without pickle
    (``RankFile``): for our rank files and Chainer's snapshots alike."""
    with RankFile(path) as z:
        chainer.serializers.NpzDeserializer(z, ignore_names=ignore_names).load(target)
