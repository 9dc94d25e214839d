"""The progress board's layout and what a row says, with no dependency: read by
``progress_board`` (the ranks), ``verdict`` (the node's watcher) and the rank's own death
watcher (``runtime.abort``), which loads this file alone, in a process that imports nothing
of the package (it must speak within milliseconds of its rank's death, before the launcher
tears the job down).

The file: ``HEADER`` int64 words (magic, slots, the step limit in ms, the outside factor,
the start-up limit in ms), then a row of ``ROW`` int64 words per rank of the node, then
``PATH_BYTES`` per rank (the checkpoint directory it writes to while it does).
"""
import collections
import struct

__all__ = ['MAGIC', 'HEADER', 'ROW', 'PATH_BYTES', 'RANK', 'PID', 'FINISHED_STEPS', 'PHASE',
           'COUNT', 'PROGRESS_NS', 'CALLS_MADE', 'INSIDE', 'CALL', 'CALL_NS', 'BG_CALLS',
           'BG_INSIDE', 'BG_CALL', 'STARTUP', 'STEP', 'BETWEEN', 'EVALUATION', 'CHECKPOINT',
           'AFTER', 'FINISHED', 'FINAL_EVALUATION', 'PHASES', 'where', 'read_rows', 'row_of',
           'paths_at', 'writing', 'Limits']

MAGIC = 0x63_6d_74_77_61_74_63_69  # "cmtwatci": rows with the communication columns
HEADER = 8
(RANK, PID, FINISHED_STEPS, PHASE, COUNT, PROGRESS_NS, CALLS_MADE, INSIDE, CALL, CALL_NS,
 BG_CALLS, BG_INSIDE, BG_CALL) = range(13)
ROW = 13
PATH_BYTES = 1024  # per rank: the checkpoint directory being written (UTF-8, NUL-padded)

STARTUP, STEP, BETWEEN, EVALUATION, CHECKPOINT, AFTER, FINISHED, FINAL_EVALUATION = range(8)
PHASES = {STARTUP: 'start-up', STEP: 'a training step', BETWEEN: 'between steps',
          EVALUATION: 'evaluation', CHECKPOINT: 'a checkpoint', AFTER: 'after training',
          FINAL_EVALUATION: 'the evaluation after training', FINISHED: 'done'}


class Limits(collections.namedtuple('Limits', 'limit_s startup_s outside')):
    """The watchdog's limits as the board's header holds them: the step limit, the start-up
    limit (seconds) and the factor for the phases outside steps."""

    def limit(self, phase, first_step=False):
        """Seconds without progress a phase may take: start-up (to the end of the first
        step) its own limit; a step, or an evaluation batch, the limit; between steps, in a
        checkpoint and after training, ``outside`` times it; None for the others."""
        if phase == STARTUP or (phase == STEP and first_step):
            return self.startup_s
        if phase in (STEP, EVALUATION, FINAL_EVALUATION):
            return self.limit_s
        if phase in (BETWEEN, CHECKPOINT, AFTER):
            return self.limit_s * self.outside
        return None


def where(phase, finished, count):
    """Where a rank is, in words, from its row's phase, steps finished and count."""
    if phase == STARTUP:
        return 'at start-up (before its first training step)'
    if phase == STEP:
        if finished == 0:
            return 'in its first training step (start-up)'
        return 'in training step {}'.format(finished + 1)
    if phase == EVALUATION:
        if finished == 0:
            return 'in an evaluation before its first step (batch {})'.format(count)
        return 'in the evaluation after step {} (batch {})'.format(finished, count)
    if phase == FINAL_EVALUATION:
        return 'in the evaluation after training (batch {})'.format(count)
    if phase == CHECKPOINT:
        return 'in the checkpoint after step {}'.format(finished)
    if phase == BETWEEN:
        return 'between steps {} and {} (data, extensions)'.format(finished, finished + 1)
    if phase == AFTER:
        return 'after training'
    return PHASES.get(phase, 'phase {}'.format(phase))


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
    return [struct.unpack_from('<{}q'.format(ROW), data, 8 * (HEADER + ROW * i))
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
