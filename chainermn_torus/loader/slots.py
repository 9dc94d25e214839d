"""The loader's shared memory: new segments under unpredictable names in /dev/shm, a loader
process's attach, and the iterator's processes, pipes and segments released once."""
import os
from multiprocessing import shared_memory

from chainermn_torus.runtime.files import devshm, shared_paths
from chainermn_torus.watchers.processes import state as process_state

__all__ = ['new', 'attach', 'Resources']


def new(prefix, size):
    """A new shared segment ``<prefix><token>`` (``shared_paths.create_unique``: a name
    another user made first in the sticky /dev/shm is passed over), sized, then mapped."""
    fd, path = shared_paths.create_unique(devshm.SHM_DIR, prefix)
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    return shared_memory.SharedMemory(name=os.path.basename(path))


def attach(name):
    # Spawned children share the training process's resource tracker, where the segment is
    # already registered (the tracker keeps a set): attaching adds nothing to undo.
    return shared_memory.SharedMemory(name=name)


class Resources:
    """Processes, pipes and segments; released once, by finalize() or by the collector."""

    def __init__(self):
        self.procs, self.segments, self.tasks, self.results = [], [], [], []
        self.linked = []  # segments whose names are still in /dev/shm

    def unlink(self):
        """Remove the segments' names; the mappings stay valid in every process."""
        for seg in self.linked:
            try:
                seg.unlink()
            except FileNotFoundError:
                pass
        self.linked = []

    def release(self):
        for conn in self.tasks:
            try:
                conn.send(None)
            except (ValueError, OSError):
                pass
        for p in self.procs:
            if process_state(p.pid) == 'T':
                p.kill()  # stopped: nothing but SIGKILL ends it, and it would read nothing
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        self.procs = []
        self.unlink()
        for seg in self.segments:
            try:
                seg.close()
            except BufferError:
                pass  # arrays handed out still view it: the mapping goes with them
        self.segments = []
        for conn in self.tasks + self.results:
            conn.close()
        self.tasks, self.results = [], []
