"""Every ``CHAINERMN_TORUS_*`` setting, in one table, with one parser per kind, resolved once.

The one precedence, for every row: a value given for it (the launcher's flag, an entry
point's option, a keyword in code) wins; otherwise its environment variable; otherwise its
default. ``resolve`` applies it to the whole table at once and returns a frozen ``Settings``:
each value with where it came from (the option, the variable, or the default). The process
holds one (``current``): the launcher installs the one it resolved from its flags; without
one, the first read makes it from the environment, which is at the first communicator or
multi-node optimizer in a script (``process_setup``), so a variable the script sets before
then is heard. Every module reads that object; none reads the environment.

Every bad value gets the same kind of message: which option or variable, what it must be,
what it was. This table is the reference: ``chainermn-torus config`` prints it, and
docs/communicators.md lists it (a test keeps the two the same).
"""
import argparse
import collections
import os
import re
import types

from chainermn_torus.errors import ConfigError
from chainermn_torus.process import STATE

__all__ = ['SETTINGS', 'KINDS', 'Settings', 'resolve', 'current', 'defaults', 'alone', 'install',
           'parse', 'parse_command_line',
           'quiet', 'table', 'add_arguments', 'add_communicator', 'add_option',
           'flags', 'options', 'parse_args', 'option_of']

# ``launcher``: what ``python -m chainermn_torus.run`` applies the setting to as its option
# --KEY-WITH-DASHES (LAUNCHER_TARGETS: the script's multi-node optimizers, as the keyword of
# the same name; its communicators; its iterators; the process; a plain script made
# data-parallel), or None where it has no such option.
Setting = collections.namedtuple('Setting', 'env kind default meaning launcher',
                                 defaults=(None,))
LAUNCHER_TARGETS = ('optimizer', 'communicator', 'iterator', 'process', 'script')

MiB = 1 << 20
MIN_SEGMENT_BYTES = 1024
MAX_SECONDS = 365 * 86400  # a limit in seconds: beyond a batch job's life, and still exact
MAX_THREADS = 65536  # beyond any node's logical CPUs: a larger count is a typo
MIN_WATCH_S = 1.0  # a watchdog limit below this is refused: its watcher wakes at least once a
# second (limit / 4, at most 1 s) and judges a node silent after 2 s; at 1e-9 s a healthy
# job was judged stalled

# What a job reads from a file another user could have written is sized before it is read
# (runtime.files.shared_paths): more than these is refused from the file's size, not read.
# A tune file is under 2 KB; a manifest is about 120 B per rank plus 100 B per parameter
# array (ResNet-50 on 4,096 ranks: 0.5 MB); a calibrate file is under 4 KB.
BOUNDS = {
    'tune_file': 64 << 10,
    'manifest': 16 << 20,
    'network_file': 1 << 20,
    # Classes a training list may name: ImageNet-21k has 21,841; beyond this a label is a typo
    # (a label of 10**9 once built a list of 10**9 class numbers and was OOM-killed).
    'classes': 1 << 20,
    # A module --gpu-calls reads (the script's, and those it imports from its directories):
    # the largest hand-written modules are a few hundred KiB.
    'module': 8 << 20,
    # A listing of a shared directory (the tune folder's kept choices): entries read and
    # seconds spent at most; past either the job reads only the names it made itself.
    # 4,096 entries take about 5 ms to list and lstat here; a planted flood costs no more.
    'listing_entries': 4096,
    'listing_seconds': 0.25,
}

# key -> Setting. ``kind`` names a row of ``KINDS`` below; the default is the parsed value.
SETTINGS = collections.OrderedDict([
    ('grid', Setting('CHAINERMN_TORUS_GRID', 'grid', None,
                     'rsaa/rsap grid "MxN" when the code gives none (checked against P)')),
    # 4 MiB by measurement (docs/communicators.md, "Segments"; `bench.allreduce --segments`
    # repeats it): on shared memory one 102 MB MPI_Allreduce took 33 ms and the same bytes
    # in 1-4 MiB pieces 9-10 ms; 256 KiB pieces were slower again (per-call cost), 16 MiB
    # and up lost the gain.
    ('segment_bytes', Setting('CHAINERMN_TORUS_SEGMENT_BYTES', 'segment', 4 * MiB,
                              'bytes per communication segment; 0 = the whole buffer at once')),
    # Bucket size for overlap=True: see docs/optimizer.md, "Overlap with backward".
    ('bucket_bytes', Setting('CHAINERMN_TORUS_BUCKET_BYTES', 'bytes', 4 * MiB,
                             'overlap: bytes per bucket of gradients averaged during backward')),
    ('threads', Setting('CHAINERMN_TORUS_THREADS', 'threads', None,
                        'BLAS/OpenMP/numba threads per rank, or "off" to leave the libraries '
                        'alone; default: physical cores / ranks on the node')),
    ('network', Setting('CHAINERMN_TORUS_NETWORK', 'text', None,
                        'network figures for auto/plan: a preset (ofp, k) or a calibrate file')),
    ('simulate', Setting('CHAINERMN_TORUS_SIMULATE', 'switch', 'auto',
                         'auto/plan: rank the planner\'s best candidates with the SimGrid '
                         'simulator: auto (where SimGrid is installed), on, off')),
    ('tune', Setting('CHAINERMN_TORUS_TUNE', 'tune', 'off',
                     'auto: off (the predicted choice), on (measure the best few on the '
                     "job's first gradient calls, or use the choice a job of the same shape "
                     'remembered), again (measure even so, and replace it)',
                     launcher='communicator')),
    ('tune_dir', Setting('CHAINERMN_TORUS_TUNE_DIR', 'text', None,
                         'auto, tune on: the folder of remembered choices (default '
                         '~/.cache/chainermn-torus/tuned)', launcher='communicator')),
    ('simgrid_path', Setting('CHAINERMN_TORUS_SIMGRID_PATH', 'text', None,
                             'a folder holding SimGrid\'s Python module, appended to the '
                             'simulator\'s path (default: found, or Debian\'s)')),
    ('compute', Setting('CHAINERMN_TORUS_COMPUTE', 'compute', 'auto',
                        "Chainer's heavy layers (convolutions): onednn, numpy, or auto "
                        '(oneDNN where it loads)', launcher='process')),
    ('precision', Setting('CHAINERMN_TORUS_PRECISION', 'precision', 'fp32',
                          "what the convolutions and linear layers compute in: fp32, or bf16 "
                          '(bfloat16 data, float32 sums and master weights; oneDNN on a CPU '
                          'with bfloat16 instructions)', launcher='process')),
    # 256 by measurement (docs/compute.md, "Memory"; bench compute-memory): ResNet-50 makes
    # 23 geometries per batch size in training and none more in evaluation, so 256 holds
    # eleven batch sizes (the last batch of an epoch, evaluation at another size) without
    # making any twice; a geometry holds about 35 KiB beside the shared scratch buffer (66
    # of them 2.2 MiB), so the bound is a few MiB; a convolution's geometry made again costs
    # 0.4-1.5 ms (its three primitives, oneDNN's own primitive cache warm).
    ('onednn_cache', Setting('CHAINERMN_TORUS_ONEDNN_CACHE', 'count', 256,
                             'oneDNN: layer geometries (input shapes) whose primitives are '
                             'kept; the least recently used beyond this are made again when '
                             'they recur')),
    # On by measurement (runtime/cpu/allocation.py): page faults of arrays made again were 1.2 s
    # of a 3.7 s ResNet-50 iteration at batch 32 on 2 threads; kept, 2.65 s, for a resident
    # size 1.3 GB larger.
    ('keep_freed_memory', Setting('CHAINERMN_TORUS_KEEP_FREED_MEMORY', 'flag', True,
                                  "glibc's malloc keeps freed memory for the next iteration's "
                                  'arrays instead of returning it and faulting it in again '
                                  '(0: a node short of memory)', launcher='process')),
    ('watchdog', Setting('CHAINERMN_TORUS_WATCHDOG', 'limit', None,
                         'abort the job when no training step finishes for this long',
                         launcher='optimizer')),
    ('watchdog_startup', Setting('CHAINERMN_TORUS_WATCHDOG_STARTUP', 'limit', None,
                                 'with a watchdog: the limit from the first communicator to '
                                 'the end of the first training step (data loading, '
                                 'scatter_dataset, set-up); default: the larger of 900 s '
                                 'and the step limit', launcher='process')),
    ('timeline', Setting('CHAINERMN_TORUS_TIMELINE', 'text', None,
                         'record phase timelines to PREFIX.rank<R>.json', launcher='process')),
    ('expect_ranks', Setting('CHAINERMN_TORUS_EXPECT_RANKS', 'count', None,
                             'job scripts: the ranks the job asked for (nodes x ranks per '
                             'node); the launcher stops when MPI started another number')),
    ('quiet', Setting('CHAINERMN_TORUS_QUIET', 'flag', False,
                      '1: no informational lines on rank 0')),
    ('debug', Setting('CHAINERMN_TORUS_DEBUG', 'flag', False,
                      '1: a refusal (a bad value, no room, a checkpoint that cannot be '
                      'resumed) prints its traceback on every rank too, not only its message '
                      'once')),
    ('abort_hook', Setting('CHAINERMN_TORUS_ABORT_HOOK', 'switch', 'auto',
                           "one rank's uncaught exception, sys.exit or SIGTERM ends the job "
                           'naming it: auto (with this package\'s communicators, optimizer '
                           "and launcher), on (with ChainerMN's communicators too), off")),
    ('keep_mpi_shm', Setting('CHAINERMN_TORUS_KEEP_MPI_SHM', 'flag', False,
                             "keep MPICH's /dev/shm/mpich_shm_* names until MPI_Finalize "
                             '(default: removed once every rank has mapped them, so a killed '
                             'job leaves nothing)')),
    # What `python -m chainermn_torus.run` applies to an unchanged script
    # (chainermn_torus/launch/); each is also its command-line option there (--fused, ...).
    ('fused', Setting('CHAINERMN_TORUS_FUSED', 'switch', 'auto',
                      'launcher: fused update kernels for the multi-node optimizers the script '
                      'makes: auto (where a kernel exists), on, off', launcher='optimizer')),
    ('flush_denormals', Setting('CHAINERMN_TORUS_FLUSH_DENORMALS', 'flag', False,
                                'launcher: flush-to-zero in the update', launcher='optimizer')),
    ('double_buffering', Setting('CHAINERMN_TORUS_DOUBLE_BUFFERING', 'flag', False,
                                 'launcher: double buffering (one-step-stale gradients)',
                                 launcher='optimizer')),
    ('overlap', Setting('CHAINERMN_TORUS_OVERLAP', 'flag', False,
                        'launcher: average gradient buckets during backward (not stale)',
                        launcher='optimizer')),
    ('fp16_allreduce', Setting('CHAINERMN_TORUS_FP16_ALLREDUCE', 'flag', False,
                               'launcher: send gradients as float16', launcher='communicator')),
    ('allreduce_dtype', Setting('CHAINERMN_TORUS_ALLREDUCE_DTYPE', 'allreduce_dtype', None,
                                'launcher: the dtype gradients travel in: float16 or bfloat16 '
                                "(half the bytes; bfloat16 keeps float32's range), float32; "
                                "default: the model's", launcher='communicator')),
    ('loader', Setting('CHAINERMN_TORUS_LOADER', 'loader', None,
                       "launcher: replace the training iterator: serial, multiprocess, ours "
                       "(the loader processes); default: the script's own", launcher='iterator')),
    ('loader_eval', Setting('CHAINERMN_TORUS_LOADER_EVAL', 'flag', False,
                            'launcher, with --loader: replace the iterators of every '
                            'Evaluator too (default: the evaluation iterator is left alone)',
                            launcher='iterator')),
    ('loader_processes', Setting('CHAINERMN_TORUS_LOADER_PROCESSES', 'count', None,
                                 'launcher: loader processes per rank (default: as many as the '
                                 'placement gives loader CPUs, up to 2)', launcher='iterator')),
    ('affinity', Setting('CHAINERMN_TORUS_AFFINITY', 'affinity', 'auto',
                         'launcher, --loader ours: placement of compute and loader processes '
                         '(auto, same-core, sibling, dedicated, none)', launcher='iterator')),
    ('dedicated_cores', Setting('CHAINERMN_TORUS_DEDICATED_CORES', 'count', None,
                                'launcher, --affinity dedicated: cores set aside for loaders',
                                launcher='iterator')),
    # 1 by measurement (docs/compute.md, "The fixed cost of an iteration"): the checks are
    # 2-3.5% of a ResNet-50 iteration on 2 threads and 10% of a small one on 16; the first
    # step checks every shape and dtype a training forward has (only the batch size varies).
    ('type_check', Setting('CHAINERMN_TORUS_TYPE_CHECK', 'type_check', 1,
                           "Chainer's type checks in the multi-node optimizer's forward and "
                           'backward: on (every step), off, or N (the first N steps, then '
                           'off, said once)', launcher='optimizer')),
    ('check_replicas', Setting('CHAINERMN_TORUS_CHECK_REPLICAS', 'count', None,
                               'launcher: compare the replicas every K steps',
                               launcher='optimizer')),
    ('check_finite', Setting('CHAINERMN_TORUS_CHECK_FINITE', 'flag', False,
                             'launcher: stop on NaN/Inf gradients (naming rank and array)',
                             launcher='optimizer')),
    # 40 Mpx: a 7,300 x 5,500 photograph, far beyond ImageNet's (0.1-0.5 Mpx mostly); decoded
    # it takes 120 MB as uint8 and 480 MB as the float32 a loader hands on. A 2 MB JPEG of
    # 13,000 x 13,000 (169 Mpx, under Pillow's bomb limit of 179 Mpx) OOM-killed a loader.
    ('max_image_pixels', Setting('CHAINERMN_TORUS_MAX_IMAGE_PIXELS', 'count', 40000000,
                                 'ImageNet data: the most pixels an image may have, read from '
                                 'its header before it is decoded; a larger one is refused '
                                 '(--skip-corrupt skips it)')),
    ('trust_checkpoints', Setting('CHAINERMN_TORUS_TRUST_CHECKPOINTS', 'flag', False,
                                  'checkpoints: resume from a directory or files another user '
                                  'owns or may write (their arrays are still read without '
                                  'pickle)')),
    ('trust_out_dir', Setting('CHAINERMN_TORUS_TRUST_OUT_DIR', 'flag', False,
                              'outputs: write into an output directory (--out, a trainer\'s '
                              'out) on a path another user owns or may write (a link one '
                              'level up, a project folder others can write)')),
    ('data_parallel', Setting('CHAINERMN_TORUS_DATA_PARALLEL', 'flag', False,
                              'launcher: make a plain Chainer script data-parallel (shards, '
                              'multi-node optimizer and evaluator, rank-0-only reports)',
                              launcher='script')),
    ('gpu_to_cpu', Setting('CHAINERMN_TORUS_GPU_TO_CPU', 'flag', False,
                           "launcher: run a script written for GPUs on each rank's CPU: the "
                           'GPU devices, arrays and communicator names it asks for become the '
                           "CPU's (raw CUDA kernels and NCCL refused)", launcher='script')),
    ('gpu_to_cpu_paths', Setting('CHAINERMN_TORUS_GPU_TO_CPU_PATHS', 'text', None,
                                 "launcher, --gpu-to-cpu: more directories (':' between) whose "
                                 "modules see CUDA and CuPy as the script's own directory's do "
                                 '(helpers the script imports from elsewhere)',
                                 launcher='script')),
    ('trust_gpu_to_cpu_paths', Setting('CHAINERMN_TORUS_TRUST_GPU_TO_CPU_PATHS', 'flag', False,
                                       'launcher, --gpu-to-cpu-paths: accept directories '
                                       'another user owns or may write (their modules are '
                                       'still sized before they are read)',
                                       launcher='script')),
    ('global_batch', Setting('CHAINERMN_TORUS_GLOBAL_BATCH', 'flag', False,
                             "launcher, --data-parallel: the script's batch size is the global "
                             'one, divided among the ranks (default: per rank, as ChainerMN)',
                             launcher='script')),
    ('memory_snapshots', Setting('CHAINERMN_TORUS_MEMORY_SNAPSHOTS', 'count', None,
                                 "launcher: keep a snapshot of the script's Trainer in node "
                                 'memory every N iterations and start from the newest one '
                                 'every rank holds complete: what `chainermn-torus elastic` '
                                 'goes on from after a lost node', launcher='script')),
    ('checkpoint_dir', Setting('CHAINERMN_TORUS_CHECKPOINT_DIR', 'text', None,
                               "launcher: write a checkpoint of the script's Trainer into "
                               'DIR (every epoch, or --checkpoint-interval), as the examples\' '
                               '--checkpoint-dir: what a job that lost its batch host goes on '
                               'from', launcher='script')),
    ('checkpoint_interval', Setting('CHAINERMN_TORUS_CHECKPOINT_INTERVAL', 'count', None,
                                    'launcher, --checkpoint-dir: a checkpoint every N '
                                    'iterations (default: every epoch)', launcher='script')),
    ('auto_resume', Setting('CHAINERMN_TORUS_AUTO_RESUME', 'flag', False,
                            'launcher, --checkpoint-dir: continue from the newest checkpoint '
                            'there if there is one (batch jobs that are requeued)',
                            launcher='script')),
    ('shuffle_seed', Setting('CHAINERMN_TORUS_SHUFFLE_SEED', 'seed', None,
                             "launcher: the seed of ChainerMN's scatter_dataset(shuffle=True) "
                             'where the script gives none, as if it had (default: kept in '
                             '--checkpoint-dir, the elastic run\'s, else new: said at start)',
                             launcher='script')),
    ('elastic_step', Setting('CHAINERMN_TORUS_ELASTIC_STEP', 'elastic_step', None,
                             'set by `chainermn-torus elastic` in each MPI step it starts '
                             '(RUN:STEP): the run whose snapshots in node memory the step '
                             'keeps and restores, and the step\'s number; not set by hand')),
    ('elastic_probe', Setting('CHAINERMN_TORUS_ELASTIC_PROBE', 'elastic_run', None,
                              'set by `chainermn-torus elastic` for its probe of each node '
                              '(RUN): the run whose processes and snapshots the probe ends; '
                              'in the environment, never on a command line; not set by hand')),
    # scripts/with_mpi.sh (make test MPI=...) sets these two for the tests and the benchmark
    # scripts; the package itself runs under whatever MPI mpi4py loaded.
    ('mpi', Setting('CHAINERMN_TORUS_MPI', 'mpi', 'mpich',
                    'tests and benchmark scripts: the MPI they run under (mpich, impi, '
                    'openmpi), so MPICH-only checks can skip')),
    ('mpiexec', Setting('CHAINERMN_TORUS_MPIEXEC', 'text', None,
                        "tests and benchmark scripts: that MPI's mpiexec (default: the "
                        "venv's, from the mpich wheel)")),
])

def _seconds(v):
    v = float(v)
    if not 0 < v <= MAX_SECONDS:  # inf and 1e300 overflowed the watchdog's clocks
        raise ValueError
    return v


def _limit(v):
    v = _seconds(v)
    if v < MIN_WATCH_S:
        raise ValueError
    return v


def _positive(v):
    v = float(v)
    if not 0 < v < float('inf'):
        raise ValueError
    return v


def _at_least(low):
    def whole(v):
        v = int(v)
        if v < low:
            raise ValueError
        return v
    return whole


def _segment(v):
    v = int(v)
    if v != 0 and v < MIN_SEGMENT_BYTES:
        raise ValueError
    return v


def _threads(v):
    if isinstance(v, str) and v.strip().lower() == 'off':
        return 'off'
    v = _at_least(1)(v)
    if v > MAX_THREADS:
        raise ValueError
    return v


def _flag(v):
    if isinstance(v, bool):
        return v
    text = str(v).strip().lower()
    if text in ('', '0', 'false', 'no', 'off'):
        return False
    if text in ('1', 'true', 'yes', 'on'):
        return True
    raise ValueError


def _switch(v):
    text = str(v).strip().lower()
    if text == 'auto':
        return 'auto'
    return _flag(text)


def _tune(v):
    if isinstance(v, str) and v.strip().lower() == 'again':
        return 'again'
    return 'on' if _flag(v) else 'off'


def _type_check(v):
    text = str(v).strip().lower()
    if text in ('on', 'off'):
        return text
    return _at_least(1)(text)


def _seed(v):
    v = int(v)
    if not 0 <= v < 2 ** 32:
        raise ValueError
    return v


def _non_negative(v):
    v = float(v)
    if not v >= 0:
        raise ValueError
    return v


# A kind of value: its parser, what it must be (the error's words) and the value an option's
# --help shows. A choice is its names: the three come from them, so a new choice is one row.
# ``names``: a choice's names, which its owner reads (compute.precision.NAMES,
# loader.placement.POLICIES).
Kind = collections.namedtuple('Kind', 'parse what metavar names', defaults=(None,))


def _elastic_run(v):
    if not re.match(r'^[0-9a-f]{8,32}$', v):
        raise ValueError
    return v


def _elastic_step(v):
    run, sep, step = v.partition(':')
    if not sep or not re.match(r'^[0-9a-f]{8,32}$', run) or not step.isdigit():
        raise ValueError
    return run, int(step)


def _choice(*names):
    def pick(v):
        if v not in names:
            raise ValueError
        return v
    return Kind(pick, '{} or {}'.format(', '.join(names[:-1]), names[-1]), '|'.join(names),
                names)


# grid: only the text here; communicators._grid.parse_grid checks it against the rank count.
KINDS = {
    'seconds': Kind(_seconds, 'a number of seconds > 0 and at most {} (a year)'.format(
        MAX_SECONDS), 'S'),
    'limit': Kind(_limit, 'a number of seconds >= {:g} (the watcher wakes once a second) and '
                  'at most {} (a year)'.format(MIN_WATCH_S, MAX_SECONDS), 'S'),
    'bytes': Kind(_at_least(0), 'a byte count >= 0 (0 = one message for the whole buffer)',
                  'BYTES'),
    'segment': Kind(_segment, '0 (one message for the whole buffer) or a byte count >= {} '
                    '(each segment costs several MPI calls: at 4-64 B one MLP all-reduce took '
                    '8-60 s)'.format(MIN_SEGMENT_BYTES), 'BYTES'),
    'threads': Kind(_threads, 'a thread count >= 1 and <= {} (or off)'.format(MAX_THREADS),
                    'N'),
    'grid': Kind(str, 'a grid shape "MxN"', 'MxN'),
    'text': Kind(str, 'text', 'VALUE'),
    'count': Kind(_at_least(1), 'an integer >= 1', 'N'),
    'positive': Kind(_positive, 'a finite number > 0', 'X'),
    'non-negative': Kind(_non_negative, 'a number >= 0', 'X'),
    'flag': Kind(_flag, 'on or off (1/0, true/false, yes/no)', None),  # --X / --no-X
    'switch': Kind(_switch, 'auto, on or off', 'auto|on|off'),
    'tune': Kind(_tune, 'off, on or again', 'off|on|again'),
    'seed': Kind(_seed, "an integer from 0 to 2**32 - 1 (numpy's seeds)", 'N'),
    'type_check': Kind(_type_check, 'on, off or a step count >= 1 (checked on the first N '
                       'steps)', 'on|off|N'),
    'elastic_step': Kind(_elastic_step, 'RUN:STEP (8-32 hex digits, a colon, a step number '
                         '>= 0), as `chainermn-torus elastic` sets it', 'RUN:STEP'),
    'elastic_run': Kind(_elastic_run, 'RUN (8-32 hex digits), as `chainermn-torus elastic` '
                        'sets it', 'RUN'),
    'loader': _choice('serial', 'multiprocess', 'ours'),
    'affinity': _choice('auto', 'same-core', 'sibling', 'dedicated', 'none'),
    'mpi': _choice('mpich', 'impi', 'openmpi'),
    'compute': _choice('onednn', 'numpy', 'auto'),
    'precision': _choice('fp32', 'bf16'),
    'allreduce_dtype': _choice('float16', 'bfloat16', 'float32'),
}


def _must_be(kind, raw):
    return 'must be {}, got {!r}'.format(KINDS[kind].what, raw)


def parse(kind, raw, source):
    """``raw`` as ``kind``; a ValueError naming ``source`` and what is allowed if it is not."""
    try:
        return KINDS[kind].parse(raw)
    except (TypeError, ValueError):
        raise ConfigError('chainermn_torus: {} {}'.format(source, _must_be(kind, raw))) \
            from None


def _from_environment(key, environ):
    """(value, variable) from the variable of ``key`` in ``environ``, or (default, None)."""
    s = SETTINGS[key]
    raw = environ.get(s.env)
    # Set to nothing (``VAR=``, or a job script's ``export VAR=$UNSET``) is unset, for every
    # kind alike: an empty flag once meant on, and ``CHAINERMN_TORUS_DOUBLE_BUFFERING=``
    # trained with stale gradients where an empty number meant the default.
    if raw is None or not raw.strip():
        return s.default, None
    return parse(s.kind, raw, s.env), s.env


class Settings:
    """Every setting's value and where it came from (``resolve``); frozen.

    ``settings[key]`` is the value; ``source(key)`` the option or variable that gave it, or
    None for the default; ``pick(key, given, option)`` is a value given in code for one call
    (a communicator's ``segment_size=``), which wins as a flag does, else this object's.
    """

    __slots__ = ('_values',)

    def __init__(self, values):
        object.__setattr__(self, '_values', types.MappingProxyType(dict(values)))

    def __setattr__(self, name, value):
        raise AttributeError('settings are frozen: resolve() makes another')

    def __getitem__(self, key):
        return self._values[key][0]

    def source(self, key):
        return self._values[key][1]

    def pick(self, key, given=None, option=None):
        """(value, source): ``given`` (checked, its errors naming ``option``) when not None,
        else this object's value of ``key`` and its source."""
        if given is not None:
            option = option or key
            return parse(SETTINGS[key].kind, given, option), option
        return self._values[key]

    def chosen(self):
        """{key: (value, source)} of the settings not at their default's source."""
        return {k: v for k, v in self._values.items() if v[1] is not None}

    def describe(self, keys=None):
        """``key=value (source)`` for the settings an option or variable gave."""
        return ', '.join('{}={} ({})'.format(k, _shown(v), source)
                         for k, (v, source) in self.chosen().items()
                         if keys is None or k in keys) or 'all defaults'


def _shown(value):
    if isinstance(value, bool):
        return 'on' if value else 'off'
    return value


def resolve(flags=None, environ=None):
    """The table resolved at once: ``flags`` ({key: (value, option)}: a launcher's or entry
    point's options; None values are not given) over ``environ`` (default os.environ) over
    the defaults. The first bad value raises its ConfigError."""
    environ = os.environ if environ is None else environ
    flags = flags or {}
    unknown = sorted(set(flags) - set(SETTINGS))
    if unknown:
        raise KeyError('not settings: {}'.format(', '.join(unknown)))
    values = {}
    for key, s in SETTINGS.items():
        given, option = flags.get(key, (None, None))
        if given is not None:
            values[key] = parse(s.kind, given, option or option_of(key)), option or \
                option_of(key)
        else:
            values[key] = _from_environment(key, environ)
    return Settings(values)


def defaults():
    """The table's defaults alone, no variable heard: what an object made without the
    settings handed to it (a class made directly, not by a factory) takes."""
    return resolve(environ={})


def current():
    """The process's settings: those installed (the launcher's), else resolved now from the
    environment and kept (the first read: a script's first communicator or optimizer)."""
    if STATE.settings is None:
        STATE.settings = resolve()
    return STATE.settings


def alone(key):
    """Setting ``key`` from the environment by itself, its default where its value is bad:
    for the code that says a refusal, which runs where the table does not resolve."""
    try:
        return (STATE.settings or resolve())[key]
    except ConfigError:
        try:
            return _from_environment(key, os.environ)[0]
        except ConfigError:
            return SETTINGS[key].default


def install(settings):
    """Make ``settings`` the process's (the launcher, at its start); returns them."""
    if not isinstance(settings, Settings):
        raise TypeError('install() takes a Settings from resolve(), got {!r}'.format(
            type(settings).__name__))
    STATE.settings = settings
    return settings


def quiet():
    """Whether informational lines are off (a bad value: not quiet, refused where the
    settings are resolved)."""
    try:
        return current()['quiet']
    except ConfigError:
        return False


def option_of(key):
    """The command-line option of ``key``: --key-with-dashes."""
    return '--' + key.replace('_', '-')


# --- the same options on command lines ---------------------------------------------------
# The factory's names, told by the factory (``_registry``, which sits above this table and
# is imported with the package, before any command line is parsed): a function, since
# plugins may add names.
_COMMUNICATOR_NAMES = [lambda: ()]


def set_communicator_names(names):
    """``names()`` gives the names ``--communicator`` accepts."""
    _COMMUNICATOR_NAMES[0] = names


def _communicator_name(text):
    known = _COMMUNICATOR_NAMES[0]()
    if text not in known:
        raise argparse.ArgumentTypeError('invalid choice: {!r} (unknown communicator {!r}; '
                                         'valid names: {})'.format(text, text, ', '.join(known)))
    return text


def _arg(kind):
    def convert(text):
        try:
            return KINDS[kind].parse(text)
        except (TypeError, ValueError):  # argparse puts "argument --NAME:" before this
            raise argparse.ArgumentTypeError(_must_be(kind, text))
    convert.__name__ = kind
    return convert


def _counts(kind):
    convert = _arg(kind)

    def count(text):
        value = convert(text)
        if not isinstance(value, int):
            raise argparse.ArgumentTypeError('must be a count here (this measures counts), '
                                             'got {!r}'.format(text))
        return value
    count.__name__ = kind
    return count


def arg_type(kind):
    """An argparse ``type=`` for the examples' numbers: 'count' (integer >= 1), 'positive'
    (number > 0), 'non-negative' (number >= 0), 'seed' (numpy's: 0 to 2**32 - 1); the error
    says what is allowed."""
    return _arg(kind)


def add_option(parser, key, option=None, dest=None, help=None, default=None, nargs=None,
               counts=False, aliases=(), metavar=None, const=None):
    """Declare setting ``key`` on ``parser`` (or an argument group) from its row: its option
    (default ``--key-with-dashes``, and ``aliases`` such as ``-j``), its parser and metavar,
    its meaning as the help (or ``help``); ``nargs='?'`` with ``const``: the value of the bare
    option. ``default``: this entry point's own default, which takes the row default's place
    and nothing else's (the variable still wins over it: ``options``). ``nargs`` for several
    values. ``counts``: numbers only (a benchmark's thread counts: no 'off'). A flag is
    --X / --no-X; a switch (auto/on/off) is --X [VALUE] (bare: on) / --no-X. Returns the
    argparse action; after parsing, ``options(parser, opts)`` fills in what the command line
    did not give.
    """
    s = SETTINGS[key]
    option = option or option_of(key)
    if s.kind == 'flag':
        kwargs = dict(action=argparse.BooleanOptionalAction)
    else:
        kwargs = dict(type=_counts(s.kind) if counts else _arg(s.kind),
                      metavar=metavar or ('N' if counts else KINDS[s.kind].metavar))
        if nargs is not None:
            kwargs['nargs'] = nargs
            if const is not None:
                kwargs['const'] = const
        elif s.kind == 'switch':
            kwargs.update(nargs='?', const='on')
    shown = '' if default is None else '; here {}'.format(_shown(default))
    action = parser.add_argument(option, *aliases, dest=dest or key, default=None,
                                 help='{} (or {}{})'.format(help or s.meaning, s.env, shown),
                                 **kwargs)
    if s.kind == 'switch':
        parser.add_argument('--no-' + option[2:], dest=action.dest, action='store_const',
                            const=False, help='the same as {} off'.format(option))
    action.setting = key  # what flags() and options() gather
    action.entry_default = default
    return action


def _declared(parser):
    return [a for a in parser._actions if getattr(a, 'setting', None) is not None]


def flags(parser, opts):
    """{key: (value, option)} of the settings ``parser`` declares (``add_option``) that
    ``opts`` gives: what ``resolve(flags=...)`` takes."""
    out = {}
    for action in _declared(parser):
        if getattr(opts, action.dest, None) is not None:
            out[action.setting] = (getattr(opts, action.dest), action.option_strings[0])
    return out


def options(parser, opts):
    """Fill in, on ``opts``, every setting ``parser`` declares that its command line did not
    give, by the one precedence: its variable (or the launcher's option, where the launcher
    installed its settings), else this entry point's default (``add_option(default=)``),
    else the row's. A variable's value passes the option's own checks (a benchmark's counts).
    Returns {key: (value, source)}, source None for a default. A bad value of a declared
    setting exits as argparse's errors do, naming the variable (others are left to where
    they are read)."""
    held, out = STATE.settings, {}
    for action in _declared(parser):
        key, given = action.setting, getattr(opts, action.dest, None)
        if given is not None:
            out[key] = (given, action.option_strings[0])
            continue
        # Each declared row by itself: a bad value of another is said where it is read.
        try:
            value, source = held.pick(key) if held is not None else \
                _from_environment(key, os.environ)
        except ConfigError as e:
            parser.error(str(e).replace('chainermn_torus: ', '', 1))
        if source is not None:
            value = _as_option(parser, action, value, source)
        elif action.entry_default is not None:
            value = action.entry_default
        if action.nargs in ('*', '+') and value is not None and not isinstance(value, list):
            value = [value]
        setattr(opts, action.dest, value)
        out[key] = (value, source)
    return out


def parse_args(parser, argv=None):
    """``parser.parse_args(argv)`` and then ``options``: an entry point's options, every
    setting among them filled in."""
    return parse_command_line(parser, argv)[0]


def parse_command_line(parser, argv=None):
    """(opts, flags): ``parse_args``'s options, and the settings its command line gave
    (``flags``, before ``options`` filled in the rest), for ``chainermn_torus.init(flags=)``."""
    opts = parser.parse_args(argv)
    given = flags(parser, opts)
    options(parser, opts)
    return opts, given


def _as_option(parser, action, value, source):
    """A variable's (or launcher's) ``value`` through ``action``'s own type check."""
    if action.type is None or value is None:
        return value
    try:
        return action.type(str(value)) if not isinstance(value, bool) else value
    except argparse.ArgumentTypeError as e:
        parser.error('{} {}'.format(source, e))


def add_communicator(parser, default='rsap'):
    """``--communicator NAME``, checked against the factory's names (default ``default``;
    None: the script's own choice)."""
    return parser.add_argument('--communicator', type=_communicator_name, default=default,
                               metavar='NAME', help='one of {} (default: {})'.format(
                                   ', '.join(_COMMUNICATOR_NAMES[0]()),
                                   default or "the script's own"))


def add_arguments(parser, communicator='rsap', grid=True, threads=True, segment_size=False):
    """The options every entry point shares, defined once: ``--communicator`` (default
    ``communicator``; None: the script's own choice), and from the rows ``--grid``,
    ``--threads`` and ``--segment-size``. Returns the argument group."""
    group = parser.add_argument_group('communicator (chainermn_torus)')
    add_communicator(group, communicator)
    if grid:
        add_option(group, 'grid', help='rsaa/rsap grid: rows of M ranks, N rows (default: '
                   'ranks per node x nodes)')
    if threads:
        add_option(group, 'threads')
    if segment_size:
        add_option(group, 'segment_bytes', '--segment-size', dest='segment_size')
    return group


def table():
    """The settings as Markdown rows (docs/communicators.md)."""
    rows = ['| variable | default | meaning |', '|---|---|---|']
    for s in SETTINGS.values():
        if s.default is None:
            default = 'unset'
        elif isinstance(s.default, bool):
            default = '1' if s.default else '0'
        else:
            default = s.default
        rows.append('| `{}` | {} | {} |'.format(s.env, default, s.meaning))
    return '\n'.join(rows)

