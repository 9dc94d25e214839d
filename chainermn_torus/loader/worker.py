"""A loader process's side: its loop (``run``, the spawn target), one slot filled with a
batch's examples, and how the training process names a loader that died (what ended it,
which example it was loading)."""
import multiprocessing
import os
import signal
import traceback

import numpy
from threadpoolctl import threadpool_limits

from chainermn_torus.datasets import draws
from chainermn_torus.errors import DataError, Refusal
from chainermn_torus.loader import slots
from chainermn_torus.watchers import processes

__all__ = ['run', 'fields', 'how_it_ended', 'doing']


def how_it_ended(exitcode, oom_before=None):
    """What ended a process: its exit code or signal, and, for a SIGKILL while the node's
    count of OOM kills rose since ``oom_before``, the kernel's OOM killer."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f'signal {-exitcode}'
        said = f'was killed by signal {-exitcode} ({name})'
        now = processes.oom_kills()
        if -exitcode == signal.SIGKILL and None not in (now, oom_before) and now > oom_before:
            said += (', by the kernel\'s OOM killer: out of memory (OOM kills on this node '
                     f'{oom_before} -> {now} meanwhile; use fewer --loader-processes, smaller '
                     'images or a '
                     'node with more memory)')
        return said
    return f'exited with code {exitcode}'


def doing(dataset, decoding, w):
    """', while loading example I (its file)' for loader ``w``, from the shared ``decoding``
    (index + 1, 0 between examples)."""
    index = int(decoding[w]) - 1 if decoding is not None else -1
    if index < 0:
        return ''
    where = getattr(dataset, 'example_path', None)
    try:
        path = where(index) if where is not None else None
    except Exception:  # naming is best effort: the death is what is said
        path = None
    return ', while loading example {}{}'.format(index, '' if path is None else
                                                f' ({path})')


def fields(example):
    return tuple(example) if isinstance(example, tuple) else (example,)


def run(dataset, layout, tasks, results, cpus, parent_pid, seed, decoding=None, w=0):
    """Loader process: fetch examples for index batches into the shared slots.

    ``tasks``/``results``: this process's ends of its two pipes. The first message is
    ('ready', pid) once every segment is mapped (the training process then unlinks them),
    or ('failed', text); then (task_id, None or error text) per task.
    """
    # Ctrl-C at mpiexec reaches the rank's whole process group, these processes too: the
    # rank says it and ends them (each printed a KeyboardInterrupt traceback: 90 lines).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        threadpool_limits(1)  # the compute process owns the BLAS threads
    except ImportError:
        pass
    numpy.random.seed(seed)
    mapped = []
    try:
        for slot in layout['names']:
            mapped.append([slots.attach(name) for name in slot])
    except BaseException:
        results.send(('failed', traceback.format_exc()))
        return
    arrays = [[numpy.ndarray((layout['batch_size'],) + shape, dtype, buffer=seg.buf)
               for seg, (shape, dtype) in zip(slot, layout['fields'])] for slot in mapped]
    results.send(('ready', os.getpid()))
    try:
        while True:
            task = _next_task(tasks, parent_pid)
            if task is None:
                return
            task_id, slot, indices, epoch = task
            draws.set_epoch(epoch)  # random augmentation keyed by it, not by this process
            try:
                results.send(_fill_slot(dataset, arrays[slot], task_id, indices,
                                        decoding, w))
            except (BrokenPipeError, OSError):
                return
    finally:
        del arrays
        for slot in mapped:
            for seg in slot:
                seg.close()


def _next_task(tasks, parent_pid):
    """The next task, or None when the training process is gone or says stop."""
    while True:
        try:
            if tasks.poll(1.0):
                return tasks.recv()
        except (EOFError, OSError):
            return None  # the training process closed its end (or died)
        # The training process started us (spawn), so it is our parent until it exits; then
        # we are re-parented at once, even while it is an unreaped zombie (which a
        # kill(pid, 0) test would still find).
        if os.getppid() != parent_pid:
            return None  # the training process is gone: do not linger


def _fill_slot(dataset, arrays, task_id, indices, decoding=None, w=0):
    """Examples ``indices`` into one slot's ``arrays``; the message for the training
    process: (task_id, None), or the error, one line for a known cause. ``decoding[w]``:
    the example being loaded, + 1, so that a death names it (the OOM killer's SIGKILL
    leaves no message)."""
    try:
        for j, index in enumerate(indices):
            if decoding is not None:
                decoding[w] = index + 1
            example = fields(dataset[index])
            if decoding is not None:
                decoding[w] = 0
            if len(example) != len(arrays):
                raise DataError(f'example {index} has {len(example)} fields, the first '
                                f'had {len(arrays)}')
            for dst, value in zip(arrays, example):
                value = numpy.asarray(value)
                if value.shape != dst.shape[1:]:
                    raise DataError(
                        f'example {index} has shape {value.shape}, the first example '
                        f'had {dst.shape[1:]}: the loader '
                        'needs examples of one shape (crop or resize them)')
                dst[j] = value
        return task_id, None
    except Refusal as e:  # a known cause, named (a file that cannot be read): one line
        return task_id, ('refusal', str(e))
    except BaseException:
        return task_id, ('error', f'loader process {multiprocessing.current_process().name} '
                                  f'(pid {os.getpid()}), example '
                                  f'batch {list(indices)[:8]}:\n{traceback.format_exc()}')
