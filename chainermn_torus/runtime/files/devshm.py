"""/dev/shm: room before every allocation, names a user can attribute, and the sweep.

On cluster nodes /dev/shm is RAM; this module keeps what a job puts there from killing it,
or the next job on the node:

* ``check_room``: what an allocation needs (whole pages per rank, plus ``MPI_MARGIN``)
  against what is free, on every rank of the communicator at once, one error on all naming
  the node, the bytes and the fixes; ``populate`` then backs every page at once
  (``MADV_POPULATE_WRITE``), so a shortfall is an error, not a SIGBUS at the first write.
* ``sweep``: files of ours (``cmtorus_<job>_<pid>_...``) whose process is gone and, with
  ``others=True``, MPICH's, Open MPI's and multiprocessing's that no process maps or holds
  open and that are older than a minute; only the caller's own files (root: everyone's).
* ``unlink_mpi_segments``: MPICH's ``mpich_shm_*`` name removed once every rank has passed
  MPI_Init (``CHAINERMN_TORUS_KEEP_MPI_SHM=1``: kept); ``unlink_at_end``: every MPI's
  segment names on an early end; ``unlink_singleton``: Open MPI's singleton's segment.

Why, and what was measured: docs/internals.md (runtime/files/devshm.py).
"""
import ctypes
import errno
import functools
import os
import re
import signal
import socket
import sys
import time

from chainermn_torus import config
from chainermn_torus.errors import ConfigError, Refusal
from chainermn_torus.process import STATE
from chainermn_torus.runtime import agree
from chainermn_torus.watchers import processes
from chainermn_torus.runtime.files import held
from chainermn_torus.runtime.files import sweep as sweep_files
from chainermn_torus.runtime.report import format_bytes

__all__ = ['SHM_DIR', 'PREFIX', 'job_tag', 'segment_prefix', 'free_bytes', 'check_room',
           'populate', 'pages', 'total_bytes', 'MPI_MARGIN',
           'SharedMemoryFull', 'sweep', 'unlink_mpi_segments', 'unlink_at_end',
           'unlink_singleton', 'in_use']

SHM_DIR = '/dev/shm'
PREFIX = 'cmtorus_'
_OURS = re.compile(r'^' + PREFIX + r'(?P<job>[A-Za-z0-9.-]+)_(?P<pid>\d+)_')
# MPICH's segment, multiprocessing's semaphores, Open MPI's shared-memory btl segments (5.x
# sm_segment.*, 4.x vader_segment.*).
_OTHERS = re.compile(r'^(mpich_shm_|sem\.mp-|sm_segment\.|vader_segment\.)')
_OPEN_MPI = re.compile(r'^(sm_segment\.|vader_segment\.)')
_JOB_VARS = ('SLURM_JOB_ID', 'PBS_JOBID', 'PJM_JOBID', 'JOB_ID', 'LSB_JOBID')
MIN_AGE_S = 60.0  # a file this young may belong to a job that has not mapped it yet


class SharedMemoryFull(Refusal, MemoryError):
    """/dev/shm cannot hold an allocation (raised on every rank of the communicator)."""


def job_tag():
    """The batch system's job id (characters a file name can hold), or 'nojob'."""
    for var in _JOB_VARS:
        value = os.environ.get(var)
        if value:
            return re.sub(r'[^A-Za-z0-9.-]', '-', value.split('.')[0])[:40] or 'nojob'
    return 'nojob'


def segment_prefix():
    """``cmtorus_<job>_<pid>_``: every segment name of this process starts with it."""
    return f'{PREFIX}{job_tag()}_{os.getpid()}_'


PAGE = os.sysconf('SC_PAGE_SIZE')
# What MPI adds to a shared window of a node beyond the ranks' pages: MPICH's window
# bookkeeping took 12-16 KB (a window failed at free = need + 12 KB and fitted at + 16 KB);
# four times that, so that the check rather than the population refuses in the common case.
MPI_MARGIN = 64 << 10
_MADV_POPULATE_WRITE = 23  # linux/mman.h, 5.14+


def free_bytes(path=SHM_DIR):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def total_bytes(path=SHM_DIR):
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def pages(nbytes):
    """``nbytes`` rounded up to whole pages: what tmpfs allocates for them."""
    return -(-int(nbytes) // PAGE) * PAGE


def _both(needed, free):
    """Two sizes a reader can compare: exact bytes where the rounded figures look equal."""
    a, b = format_bytes(needed), format_bytes(free)
    if a == b:
        return f'{int(needed):,} B', f'{int(free):,} B'
    return a, b


def _verdict(needed, what, path):
    try:
        free = free_bytes(path)
        total = total_bytes(path)
    except OSError as e:
        return None, f'cannot stat {path}: {e}'
    if needed <= free:
        return free, None
    need_s, free_s = _both(needed, free)
    return free, (f'{what} needs {need_s} in {path} on node {socket.gethostname()}, which '
                  f'has {free_s} free (of {format_bytes(total)})')


def check_room(needed, what, comm=None, path=SHM_DIR):
    """Raise SharedMemoryFull on every rank of ``comm`` if any rank lacks ``needed`` bytes.

    ``needed``: what this rank's node must hold for the allocation (its share times the
    ranks of ``comm`` on the node). Collective over ``comm`` when given: the allocation that
    follows is collective too, so either every rank allocates or every rank raises.
    """
    _refuse_if_any(_verdict(needed, what, path)[1], what, comm)


def _refuse_if_any(problem, what, comm):
    """Collective over ``comm``: raise SharedMemoryFull on every rank if any rank has a
    ``problem``, with the first one and the fixes."""
    bad = agree.problems(comm, problem)
    if not bad:
        return
    first = bad[0][1]
    ranks = agree.ranks_text(bad)
    raise SharedMemoryFull(
        'chainermn_torus: not enough shared memory: {}{}. Without this check the job would '
        'die with "Bus error". Fixes: remove what dead jobs left (chainermn-torus clean), '
        'ask for a larger /dev/shm (containers: --shm-size), use fewer ranks per node or '
        'smaller buffers{}.'.format(
            first, '' if comm is None else f' (rank(s) {ranks} of the communicator)',
            '' if 'loader' in what else ', or a communicator without node-shared windows '
            "(pure_allreduce, or rsaa with shm=False)"))


def populate(array, what, needed, comm=None, path=SHM_DIR, method='madvise'):
    """Back every page of ``array`` (this rank's part of a shared mapping) now; collective
    over ``comm``: if any rank's pages cannot be backed, every rank raises
    SharedMemoryFull. Returns False where the kernel cannot populate (before 5.14: the
    check before the allocation is all there is).

    Where /dev/shm runs out, the kernel answers EFAULT here instead of killing the process
    with SIGBUS at the first write. Kernels without MADV_POPULATE_WRITE (before 5.14, which
    many clusters run) get the same answer from a forked child that writes zeros to the
    pages (they are shared, so the child's writes back them for the parent): a SIGBUS
    kills the child, not the rank. ``method='fork'`` forces that path (tests). The pages
    are the ones the job writes at its first step anyway, so this moves their cost earlier
    rather than adding one. The array must hold nothing yet: the child overwrites it.
    """
    problem, supported = None, True
    if array is not None and array.nbytes:
        libc = _libc()
        err = 0
        start = array.ctypes.data - array.ctypes.data % PAGE
        length = pages(array.ctypes.data % PAGE + array.nbytes)
        if method == 'madvise' and libc.madvise(start, length, _MADV_POPULATE_WRITE) != 0:
            err = ctypes.get_errno()
        if method == 'fork' or err in (errno.EINVAL, errno.ENOSYS):
            supported = method == 'fork'
            try:
                err = errno.EFAULT if _bus_error_in_child(array) else 0
            except OSError:  # no fork here (limits): the check before allocating stands
                err = 0
        if err:
            try:
                free, total = free_bytes(path), total_bytes(path)
            except OSError:
                free = total = 0
            need_s, free_s = _both(needed, free)
            problem = (f'{what} ({need_s} needed on node {socket.gethostname()}) cannot be backed '
                       f'by {path}: {free_s} of {format_bytes(total)} is free '
                       f'now, after the allocation ({os.strerror(err)})')
    _refuse_if_any(problem, what, comm)
    return supported


def _bus_error_in_child(array):
    """Write zeros over ``array`` in a forked child; True if the child died of SIGBUS."""
    libc = _libc()
    pid = os.fork()
    if pid == 0:  # only a memset and _exit: nothing that takes a lock another thread held
        libc.memset(array.ctypes.data, 0, array.nbytes)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGBUS


@functools.lru_cache(maxsize=None)
def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise.restype = ctypes.c_int
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    libc.memset.restype = ctypes.c_void_p
    return libc


def in_use(paths):
    """The subset of ``paths`` some process on this node has mapped or open.

    A process of the caller's own user whose /proc entries cannot be read counts as using
    everything: a file is only removed when nobody can be using it. Other users' processes
    cannot open the caller's files (MPICH and multiprocessing create them 0600), and what
    root cannot read is not a user process (a sandbox's init).
    """
    used, blind = set(), False
    targets = set(paths)
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open(f'/proc/{pid}/maps') as f:
                for line in f:
                    parts = line.split(None, 5)
                    if len(parts) == 6:
                        used.update(t for t in targets if parts[5].startswith(t))
            fd_dir = f'/proc/{pid}/fd'
            for fd in os.listdir(fd_dir):
                try:
                    target = os.readlink(os.path.join(fd_dir, fd))
                except OSError:
                    continue
                if target in targets:
                    used.add(target)
        except FileNotFoundError:
            continue  # the process exited meanwhile
        except PermissionError:
            try:
                mine = os.stat(f'/proc/{pid}').st_uid == os.getuid()
            except OSError:
                mine = False
            blind = blind or (mine and os.getuid() != 0)
    return targets if blind else used


def sweep(path=SHM_DIR, others=False, dry_run=False, min_age=MIN_AGE_S, now=None):
    """Remove leftovers (see the module doc); returns [(name, bytes, why)] removed."""
    now = time.time() if now is None else now
    uid = os.getuid()
    doomed = []
    for name in sorted(os.listdir(path)):
        try:
            st = os.lstat(os.path.join(path, name))
        except FileNotFoundError:
            continue
        if uid != 0 and st.st_uid != uid:
            continue
        m = _OURS.match(name)
        if m:
            if not processes.alive(int(m.group('pid'))):
                doomed.append((name, 'process {} of job {} is gone'.format(
                    m.group('pid'), m.group('job'))))
        elif others and _OTHERS.match(name) and now - st.st_mtime >= min_age:
            doomed.append((name, 'no process maps or holds it'))
    if others:
        busy = in_use([os.path.join(path, n) for n, why in doomed
                        if why.startswith('no process')])
        doomed = [d for d in doomed if os.path.join(path, d[0]) not in busy]
    with held.as_named(path, 'the shared-memory directory') as place:
        return sweep_files.remove(place, doomed, dry_run)


def unlink_mpi_segments():
    """Remove the names of MPICH's MPI_Init segments this process maps (module doc).

    Call only after a collective over the job's ranks (every rank of the node has mapped
    them by then); once per process. Returns the paths it removed. A bad
    ``CHAINERMN_TORUS_KEEP_MPI_SHM`` is refused after the names are removed (the refusal
    ends the job, and the job's segments stayed behind when it came first).
    """
    if STATE.devshm['unlinked']:
        return []
    try:
        keep = config.current()['keep_mpi_shm']
    except ConfigError:
        keep, bad = False, True
    else:
        bad = False
    if keep:
        return []
    STATE.devshm['unlinked'] = True
    removed = _unlink_mapped() + unlink_singleton()
    if bad:
        config.current()  # raises the refusal, nothing left to leak
    return removed


def unlink_singleton():
    """Where this process is a job of its own (MPI started without a launcher), remove the
    names of Open MPI's segments it maps (module doc); elsewhere nothing. Returns the
    paths it removed."""
    mpi = sys.modules.get('mpi4py.MPI')  # never started here: only asked whether it runs
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return []
    if mpi.COMM_WORLD.Get_size() != 1 or mpi.Comm.Get_parent() != mpi.COMM_NULL:
        return []
    return _unlink_mapped(_OPEN_MPI)


# MPICH's launcher (hydra) writes the node's hwloc topology here when the first rank of the
# node asks in MPI_Init, and its proxy removes it when it ends; killed by an MPI_Abort, it
# left it, one per aborted job (68 on one machine).
HYDRA_TOPOLOGY = '/tmp/hydra_hwloc_xmlfile_'


def mpi_started():
    """Note that MPI_Init has returned (the abort hook, as it is installed), in seconds."""
    STATE.devshm['mpi_started'] = time.time()


def remove_launcher_topology(rank=None, until=None):
    """The job is being aborted, or its ranks here ended: remove the hwloc topology file
    MPICH's proxy on this node (the parent of ``rank``, default this process, a
    ``hydra_pmi_proxy``) wrote for the node's ranks: the file of this user written between
    the proxy's start and ``until`` (default the end of this process's MPI_Init). Returns the
    paths removed."""
    seen = processes.stat(rank) if rank is not None else None
    proxy = seen.ppid if seen is not None else os.getppid()
    for _ in range(3):  # a wrapper script or two between
        if processes.name(proxy) == 'hydra_pmi_proxy':
            break
        seen = processes.stat(proxy)
        proxy = seen.ppid if seen is not None else 1
    else:
        return []
    until = until if until is not None else STATE.devshm['mpi_started']
    if until is None:
        return []
    begin, end = processes.started_at(proxy), until
    if begin is None:
        return []
    removed = []
    directory, prefix = os.path.split(HYDRA_TOPOLOGY)
    for entry in os.scandir(directory):
        try:
            if not entry.name.startswith(prefix):
                continue
            st = entry.stat(follow_symlinks=False)
            if st.st_uid == os.getuid() and begin - 0.05 <= st.st_mtime <= end + 0.05:
                os.unlink(entry.path)
                removed.append(entry.path)
        except OSError:
            continue  # another rank of the node was first
    return removed


def unlink_at_end():
    """The job is ending (an abort, a refusal, a signal): remove the names of every MPI
    library's shared segments this process maps (MPICH's ``mpich_shm_*``, Open MPI's
    ``sm_segment.*`` and ``vader_segment.*``). Nothing of the job attaches to them any more,
    and the mappings stay valid; left to MPI_Finalize, which an ending job skips, they
    stayed behind (16 MiB per Open MPI rank). Returns the paths it removed."""
    return _unlink_mapped(_OTHERS)


def _unlink_mapped(pattern=None):
    pattern = pattern or re.compile(r'^mpich_shm_')
    removed = []
    try:
        with open('/proc/self/maps') as f:
            fields = [line.split(None, 5) for line in f]
    except OSError:
        return []
    paths = {parts[5].strip() for parts in fields if len(parts) == 6}
    for path in sorted(paths):
        if os.path.dirname(path) == SHM_DIR and pattern.match(os.path.basename(path)):
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:  # another rank of the node was first, or not ours to remove
                pass
    return removed
