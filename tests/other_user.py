"""Another user of the node, for the tests of what a job shares (runtime.files.shared_paths):
a forked child of the test process that becomes uid 65534 (nobody) and does one thing, and
a directory both can write, sticky as /tmp is. Needs root (CI runs as root)."""
import json
import os
import shutil
import tempfile

import pytest

OTHER_UID = 65534  # nobody

needs_root = pytest.mark.skipif(os.getuid() != 0,
                                reason='acting as another user needs root (CI runs as root)')


def as_other(action, *args):
    """``action(*args)`` run as the other user, in a forked child; its JSON-able result,
    or RuntimeError with the child's error."""
    child = Beside(action, *args)
    child.go()
    return child.result()


@pytest.fixture
def shared_dir():
    """A directory every user can write, sticky (as /tmp and /dev/shm are), removed after."""
    where = tempfile.mkdtemp(prefix='cmtorus-shared-', dir='/tmp')
    os.chmod(where, 0o1777)
    yield where
    shutil.rmtree(where, ignore_errors=True)


class Beside:
    """``action(*args)`` run as the other user in a forked child once ``go()`` is called,
    while the test goes on (a rename beside a running job); ``result()`` waits for it."""

    def __init__(self, action, *args):
        go_read, self._go = os.pipe()
        self._out, out_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self._go)
            os.close(self._out)
            try:
                os.setgroups([])
                os.setgid(OTHER_UID)
                os.setuid(OTHER_UID)
                os.read(go_read, 1)
                out = {'ok': action(*args)}
            except BaseException as e:
                out = {'error': f'{type(e).__name__}: {e}'}
            os.write(out_write, json.dumps(out).encode())
            os._exit(0)
        os.close(go_read)
        os.close(out_write)

    def go(self):
        os.write(self._go, b'!')

    def result(self):
        with os.fdopen(self._out, 'rb') as f:
            out = json.loads(f.read() or b'{"error": "the child said nothing"}')
        os.close(self._go)
        os.waitpid(self.pid, 0)
        if 'error' in out:
            raise RuntimeError(out['error'])
        return out['ok']
