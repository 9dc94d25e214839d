"""The multi-node optimizer's NaN/Inf checks (``check_finite=True``), said the same on every
rank: before averaging (each rank's gradients, and with float16 communication the values
that would overflow on the way), after averaging (the means: float16's range can be passed
by the mean alone), and overlap's bucketed means, which are checked without knowing the
rank they came from. The counting is ``runtime.cpu.finite``'s.
"""
import numpy
from mpi4py import MPI

from chainermn_torus.communicators import capabilities
from chainermn_torus.errors import Refusal
from chainermn_torus.runtime import agree
from chainermn_torus.runtime.cpu import finite

__all__ = ['NonFiniteGradientError', 'check_finite_grads', 'check_finite_means',
           'check_bucket_means', 'FLOAT16_MAX']


class NonFiniteGradientError(Refusal, FloatingPointError):
    pass


FLOAT16_MAX = float(numpy.finfo(numpy.float16).max)  # 65504


def _sent_limit(communicator):
    """The largest |gradient| the communicator can send, or inf: float16 communication
    scales by 1/P and converts, so beyond 65504 x P a value would travel as inf."""
    dtype = capabilities.grad_dtype(communicator)
    if dtype is not None and numpy.dtype(dtype) == numpy.float16:
        return FLOAT16_MAX * communicator.size
    return numpy.inf


def _scan_grads(target, limit, describe):
    """(values that are NaN, infinite or beyond +-limit in the float gradients of
    ``target``, ``describe(name, flat, bad)`` of the first array holding any, or '')."""
    first, count = '', 0
    for name, p in sorted(target.namedparams()):
        g = p.grad
        if g is None or g.dtype.kind != 'f':
            continue
        flat = g.reshape(-1) if g.flags.c_contiguous else g.ravel()
        bad = finite.count_nonfinite(flat, limit)
        if bad and not first:
            first = describe(name, flat, bad)
        count += bad
    return count, first


def check_finite_grads(communicator, target):
    """Raise NonFiniteGradientError on every rank if any rank has a NaN/Inf gradient, or,
    with float16 communication, one that would overflow to Inf on the way (before any rank
    sends or updates anything)."""
    limit = _sent_limit(communicator)
    count, first = _scan_grads(target, limit, lambda name, flat, bad: _describe_bad(
        name, flat, bad, limit))
    mpi_comm = communicator.mpi_comm
    counts = numpy.array([count], numpy.int64)
    mpi_comm.Allreduce(MPI.IN_PLACE, [counts, MPI.INT64_T], op=MPI.SUM)
    if counts[0]:  # only now pay for names
        bad_ranks = agree.problems(mpi_comm, (count, first) if count else None)
        overflow = numpy.isfinite(limit)
        raise NonFiniteGradientError(
            'chainermn_torus: {} in gradients before averaging on rank(s) {}: {}. Lower '
            'the learning rate, check the data on those ranks, or use loss scaling{}.'.format(
                'NaN/Inf or float16 overflow' if overflow else 'NaN/Inf',
                agree.ranks_text(bad_ranks),
                '; '.join(f'rank {r}: {c} bad value(s), first in {f}'
                          for r, (c, f) in bad_ranks),
                '; or send gradients as float32 (allreduce_grad_dtype=None, no '
                '--fp16-allreduce)' if overflow else ''))


def _transfer_kind(communicator):
    dtype = capabilities.grad_dtype(communicator)
    return 'float16' if dtype is not None and numpy.dtype(dtype) == numpy.float16 else 'other'


# Why a mean can be non-finite when every rank's gradients were finite and sendable.
_MEAN_RANGE = {
    'float16': '; or the mean itself is beyond float16\'s range: |mean| > 65504 cannot be '
               'carried by float16 communication even when each rank\'s share g / P can',
    'other': '; or the sum over ranks overflowed the transfer dtype',
}


def check_finite_means(communicator, target, stale=False):
    """Raise NonFiniteGradientError on every rank, before the update, if the averaged
    gradients hold NaN/Inf.

    Called after check_finite_grads passed, so a non-finite mean comes from the averaging,
    not the data: with float16 communication each rank's share g / P fits in float16 yet
    their sum, the mean, can pass 65504 and become Inf. The means are the same on every
    rank for our communicators; the count is still agreed on (8 bytes), so that no rank
    updates while another raises, whatever the communicator.
    """
    count, first = _scan_grads(target, numpy.inf, lambda name, flat, bad: f'{name} ({bad} '
                                                                          f'of {flat.size} '
                               'values)')
    counts = numpy.array([count], numpy.int64)
    communicator.mpi_comm.Allreduce(MPI.IN_PLACE, [counts, MPI.INT64_T], op=MPI.MAX)
    if not counts[0]:
        return
    if _transfer_kind(communicator) == 'float16':
        why = ('every rank\'s gradients were finite and each share g / P fit in float16, but '
               f'the mean over the {communicator.size} ranks is beyond float16\'s range (|mean| > '
               '65504) and '
               'became Inf in float16 communication: the overflow is in the averaging, not the '
               'data. Send gradients as float32 (allreduce_grad_dtype=None, no '
               '--fp16-allreduce) or scale the loss down')
    else:
        why = ('every rank\'s gradients were finite, but their mean is not: the sum over the '
               f'{communicator.size} ranks overflowed the transfer dtype. Lower the learning rate '
               'or scale the '
               'loss down')
    # Our communicators give every rank the same means: then every rank says the same words
    # (and the job says them once); a rank whose count differs says its own.
    where = '' if count == counts[0] else f' on rank {communicator.rank}'
    raise NonFiniteGradientError(
        'chainermn_torus: NaN/Inf in the averaged gradients{}: {} value(s){}{}; {}. '
        'Nothing was updated.'.format(
            ' of the previous step (double buffering)' if stale else '', count, where,
            ', the first in ' + first if first else
            f' ({counts[0]} on another rank)', why))


def _describe_bad(name, flat, bad, limit):
    nonfinite = int((~numpy.isfinite(flat)).sum())
    text = f'{name} ({bad} of {flat.size} values'
    if bad > nonfinite:
        finite = flat[numpy.isfinite(flat)]
        largest = float(numpy.abs(finite).max())
        text += (f'; {bad - nonfinite} finite beyond float16\'s range after the 1/P scaling: '
                 f'max |g| = {largest:.4g} > 65504 x P = {limit:g}')
    return text + ')'


def check_bucket_means(communicator, array):
    """overlap=True: the averaged buckets (``array``, the same on every rank) hold no
    NaN/Inf, else every rank raises the same error, before the update."""
    bad = finite.count_nonfinite(array, numpy.inf)
    if bad:
        raise NonFiniteGradientError(
            'chainermn_torus: NaN/Inf in the averaged gradients ({} value(s); with '
            'overlap=True the ranks send before the check, so the rank it came from is not '
            'known: run without overlap to name it{}). Nothing was updated. Lower the '
            'learning rate or check the data.'.format(
                bad, _MEAN_RANGE.get(_transfer_kind(communicator), '')))
