"""What a caller may ask of a communicator, declared by its class: the one place the
optimizer, the launcher, the tuner and the watchdog learn it.

Every communicator of this package derives from ``interface.Communicator``, whose class
attribute ``capabilities`` says what it offers (a subclass that offers less sets its own).
ChainerMN's communicators declare nothing and get ``FOREIGN``: only ChainerMN's own API.
Nothing is probed with ``hasattr``: a method that happens to exist is not a promise.

This module loads nothing heavy (no MPI), so that the launcher can ask before MPI starts.
"""
import collections

__all__ = ['Capabilities', 'OURS', 'FOREIGN', 'of', 'grad_dtype', 'virtual_ranks']


class Capabilities(collections.namedtuple('Capabilities', [
        'ours', 'slots', 'buckets', 'clones', 'half'])):
    """ours:    one of this package's: ``describe()``, ``timings``, the factory's options;
    slots:   ``mean_grad_in_slot(model, zero_fill, slot)``: two buffers, so that double
             buffering averages one step's gradients while the other's means are read;
    buckets: ``mean_grads_by_bucket(named, bounds, ready)``: buckets averaged as backward
             finishes them (``overlap=True``);
    clones:  ``clone(poll_interval)``: the same communicator on a duplicate MPI
             communicator, for the background thread (double buffering, overlap);
    half:    ``allreduce_grad_dtype=numpy.float16`` on CPU (half the bytes on the wire).
    """


OURS = Capabilities(ours=True, slots=True, buckets=True, clones=True, half=True)
FOREIGN = Capabilities(ours=False, slots=False, buckets=False, clones=False, half=False)


def of(comm):
    """The capabilities ``comm``'s class declares; ``FOREIGN`` for ChainerMN's."""
    declared = getattr(type(comm), 'capabilities', None)
    return declared if isinstance(declared, Capabilities) else FOREIGN


def grad_dtype(comm):
    """The dtype ``comm`` sends gradients as, or None for its default (float32). Ours keep
    it as ``allreduce_grad_dtype``; so does ChainerMN's ``pure_nccl`` (GPU), the one of
    ChainerMN's that has the setting."""
    return getattr(comm, 'allreduce_grad_dtype', None)


def virtual_ranks(comm):
    """V where ``comm`` computes as V virtual ranks (ours, made with ``virtual_ranks=V``:
    its step hands in every held rank's gradients, ``mean_grad_sets``), else None."""
    return getattr(comm, 'virtual_ranks', None) if of(comm).ours else None
