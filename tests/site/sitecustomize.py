"""Every Python process the tests start (tests/conftest.py puts this folder on PYTHONPATH):
its exit skips CPython's last full collection.

Why: at exit CPython collects every object the process still holds, once per module it
tears down; with Chainer, numba and mpi4py loaded that is about 0.17 of a rank's 0.84
CPU-s (medians of 15, docs/development.md, "Issue 36's ninth step"), and `make test` starts
hundreds of such processes on 2 cores. ``gc.freeze()`` moves the objects out of the
collector's reach. Registered here, first, it runs after every other exit hook (they run
last in, first out): what a process does at exit (MPI_Finalize, the package's own hooks,
``weakref.finalize``) still runs; only cycles nobody will see again are left to the
operating system. Never part of the package: a user's process exits as Python makes it.
"""
import atexit
import gc

atexit.register(gc.freeze)
