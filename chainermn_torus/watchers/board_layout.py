"""The progress board's layout and what a row says, with no dependency: read by
``progress_board`` (the ranks), ``verdict`` (the node's watcher) and the rank's own death
watcher (``runtime.watch.abort``), which loads this file alone, in a process that imports nothing
of the package (it must speak within milliseconds of its rank's death, before the launcher
tears the job down).

The file: ``HEADER`` int64 words (magic, slots, the step limit in ms, the outside factor,
the start-up limit in ms, where each limit came from: an index of ``STEP_SOURCES`` and
``STARTUP_SOURCES``), then a row of ``ROW`` int64 words per rank of the node, then
``PATH_BYTES`` per rank (the checkpoint directory it writes to while it does).
"""
import collections
import struct

__all__ = ['MAGIC', 'HEADER', 'ROW', 'PATH_BYTES', 'RANK', 'PID', 'FINISHED_STEPS', 'PHASE',
           'COUNT', 'PROGRESS_NS', 'CALLS_MADE', 'INSIDE', 'CALL', 'CALL_NS', 'BG_CALLS',
           'BG_INSIDE', 'BG_CALL', 'STARTUP', 'STEP', 'BETWEEN', 'EVALUATION', 'CHECKPOINT',
           'AFTER', 'FINISHED', 'FINAL_EVALUATION', 'PHASES', 'where', 'read_rows', 'row_of',
           'paths_at', 'writing', 'Limits', 'Phase', 'PHASE_TABLE', 'PHASE_OF', 'CALLS',
           'API_CALLS', 'MPI_CALLS', 'THREAD_WAIT']

MAGIC = 0x63_6d_74_77_61_74_63_69  # "cmtwatci": rows with the communication columns
HEADER = 8
(RANK, PID, FINISHED_STEPS, PHASE, COUNT, PROGRESS_NS, CALLS_MADE, INSIDE, CALL, CALL_NS,
 BG_CALLS, BG_INSIDE, BG_CALL) = range(13)
ROW = 13
PATH_BYTES = 1024  # per rank: the checkpoint directory being written (UTF-8, NUL-padded)

STARTUP, STEP, BETWEEN, EVALUATION, CHECKPOINT, AFTER, FINISHED, FINAL_EVALUATION = range(8)


class Phase(collections.namedtuple('Phase', 'code name limit first_limit order in_call_only '
                                            'words first_words')):
    """One phase a rank's row can be in, the one table every reader takes it from:

    ``name``: in a line; ``limit``: which limit holds while the rank makes no progress
    there ('startup', 'step' for a step or an evaluation batch, 'outside' for outside x the
    step limit, None: none), ``first_limit`` the same before its first step finished;
    ``order``: how far a rank there has come within the stretch after a step (the one
    furthest behind is the one waited for); ``in_call_only``: only a wait inside a
    communication call is a stall there; ``words``, ``first_words``: where the rank is, from
    its steps finished ``{f}``, the next ``{n}`` and its count ``{c}`` (first: before its
    first step finished)."""

    def where(self, finished, count):
        text = self.first_words if finished == 0 and self.first_words else self.words
        return text.format(f=finished, n=finished + 1, c=count)

    def limit_kind(self, first_step=False):
        return self.first_limit if first_step and self.first_limit else self.limit


# A new phase is one row here (and its mark in runtime.watch.watchdog).
PHASE_TABLE = (
    Phase(STARTUP, 'start-up', 'startup', None, -1, False,
          'at start-up (before its first training step)', None),
    Phase(STEP, 'a training step', 'step', 'startup', 3, False, 'in training step {n}',
          'in its first training step (start-up)'),
    Phase(BETWEEN, 'between steps', 'outside', None, 0, False,
          'between steps {f} and {n} (data, extensions)', None),
    Phase(EVALUATION, 'evaluation', 'step', None, 1, False,
          'in the evaluation after step {f} (batch {c})',
          'in an evaluation before its first step (batch {c})'),
    Phase(CHECKPOINT, 'a checkpoint', 'outside', None, 2, False,
          'in the checkpoint after step {f}', None),
    Phase(AFTER, 'after training', 'outside', None, 4, True, 'after training', None),
    Phase(FINISHED, 'done', None, None, None, False, 'done', None),
    Phase(FINAL_EVALUATION, 'the evaluation after training', 'step', None, 5, False,
          'in the evaluation after training (batch {c})', None),
)
PHASE_OF = {p.code: p for p in PHASE_TABLE}
PHASES = {p.code: p.name for p in PHASE_TABLE}

# The communication calls a rank can be in, by the name the watcher says, the one list:
# ChainerMN's communicator API and our communicators' own gradient calls (marked on the
# communicator), the optimizer's wait for its communication thread, and mpi4py's methods
# that wait for other ranks (a script calling comm.mpi_comm directly), by the call said.
# Their codes on the board: their places in CALLS, from 1 (0: another call).
API_CALLS = ('multi_node_mean_grad', 'bcast_data', 'allreduce_grad', 'allreduce_obj',
             'bcast_obj', 'gather_obj', 'scatter', 'send_obj', 'recv_obj', 'send', 'recv',
             'bcast', 'gather', 'allgather', 'allreduce', 'alltoall', 'split', 'finalize',
             'mean_grad_in_slot', 'mean_grads_by_bucket')
THREAD_WAIT = 'the wait for the communication thread'
MPI_CALLS = {
    'barrier': 'MPI barrier', 'Barrier': 'MPI barrier', 'bcast': 'MPI bcast',
    'Bcast': 'MPI bcast', 'allreduce': 'MPI allreduce', 'Allreduce': 'MPI allreduce',
    'allgather': 'MPI allgather', 'Allgather': 'MPI allgather',
    'Allgatherv': 'MPI allgather', 'gather': 'MPI gather', 'Gather': 'MPI gather',
    'Gatherv': 'MPI gather', 'scatter': 'MPI scatter', 'Scatter': 'MPI scatter',
    'Scatterv': 'MPI scatter', 'send': 'MPI send', 'ssend': 'MPI send', 'Send': 'MPI send',
    'Ssend': 'MPI send', 'recv': 'MPI recv', 'Recv': 'MPI recv',
    'sendrecv': 'MPI sendrecv', 'Sendrecv': 'MPI sendrecv', 'alltoall': 'MPI alltoall',
    'Alltoall': 'MPI alltoall', 'Alltoallv': 'MPI alltoall', 'reduce': 'MPI reduce',
    'Reduce': 'MPI reduce', 'Reduce_scatter': 'MPI reduce_scatter',
    'Reduce_scatter_block': 'MPI reduce_scatter', 'scan': 'MPI scan', 'Scan': 'MPI scan',
    'exscan': 'MPI scan', 'Exscan': 'MPI scan'}
CALLS = API_CALLS + (THREAD_WAIT,) + tuple(sorted(set(MPI_CALLS.values()),
                                                  key=list(MPI_CALLS.values()).index))


# Where a limit came from, as a verdict names it (the board holds the index): the variable,
# the launcher's option, a multi-node optimizer's keyword; for start-up, also the default.
STEP_SOURCES = ('CHAINERMN_TORUS_WATCHDOG', '--watchdog', "the optimizer's watchdog=")
STARTUP_SOURCES = ('CHAINERMN_TORUS_WATCHDOG_STARTUP', '--watchdog-startup',
                   'the default: the larger of 900 s and the step limit')


def source_index(sources, source):
    """The index of ``source`` (one of ``sources``: an option, a variable, a keyword or the
    default) in ``sources``; the first (the variable) where it is none of them."""
    return sources.index(source) if source in sources else 0


class Limits(collections.namedtuple('Limits', 'limit_s startup_s outside limit_from startup_from',
                                    defaults=(STEP_SOURCES[0], STARTUP_SOURCES[0]))):
    """The watchdog's limits as the board's header holds them: the step limit, the start-up
    limit (seconds), the factor for the phases outside steps, and where the two limits came
    from (a flag, a variable, a keyword or the default), as the verdicts name them."""

    def seconds(self, kind):
        """The seconds of a limit kind of ``PHASE_TABLE`` (None: none)."""
        return {'startup': self.startup_s, 'step': self.limit_s,
                'outside': None if self.outside is None else self.limit_s * self.outside,
                None: None}[kind]

    def limit(self, phase, first_step=False):
        """Seconds without progress a phase may take (``PHASE_TABLE``), None for none."""
        row = PHASE_OF.get(phase)
        return None if row is None else self.seconds(row.limit_kind(first_step))


def where(phase, finished, count):
    """Where a rank is, in words, from its row's phase, steps finished and count."""
    row = PHASE_OF.get(phase)
    return f'phase {phase}' if row is None else row.where(finished, count)


def read_rows(path):
    """Every row of the board at ``path`` as a tuple of ints (a copy), or [] where it is not
    one (gone, cut short, another file)."""
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except OSError:
        return []
    if len(data) < 8 * HEADER:
        return []
    magic, slots = struct.unpack_from('<qq', data, 0)
    if magic != MAGIC or len(data) < 8 * (HEADER + ROW * slots):
        return []
    return [struct.unpack_from(f'<{ROW}q', data, 8 * (HEADER + ROW * i))
            for i in range(slots)]


def paths_at(slots):
    """The byte offset of the path area of a board of ``slots`` rows."""
    return 8 * (HEADER + ROW * slots)


def writing(path):
    """[(pid, directory)] of the ranks on the board at ``path`` that are writing a
    checkpoint there (a path set), [] where it is not a board."""
    rows = read_rows(path)
    try:
        with open(path, 'rb') as f:
            f.seek(paths_at(len(rows)))
            data = f.read(PATH_BYTES * len(rows))
    except OSError:
        return []
    out = []
    for i, row in enumerate(rows):
        name = data[i * PATH_BYTES:(i + 1) * PATH_BYTES].split(b'\0', 1)[0]
        if row[PID] and name:
            out.append((row[PID], name.decode('utf-8', 'surrogateescape')))
    return out


def row_of(path, pid):
    """The row of process ``pid`` on the board at ``path``, or None."""
    for row in read_rows(path):
        if row[PID] == pid:
            return row
    return None
