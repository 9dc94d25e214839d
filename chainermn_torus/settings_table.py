"""Every ``CHAINERMN_TORUS_*`` setting in one table: its variable, its kind (one parser per
kind, whose errors say what is allowed), its default, its meaning, and the launcher target
that applies it; ``parse`` checks a value by its kind, ``table`` writes the rows as Markdown
(docs/communicators.md; ``chainermn-torus config`` prints them). Resolving a process's values
from the table is ``config``'s; the same rows as command-line options, ``command_line``'s.
"""
import collections
import re

from chainermn_torus.errors import ConfigError

__all__ = ['SETTINGS', 'KINDS', 'BOUNDS', 'Setting', 'Kind', 'LAUNCHER_TARGETS', 'parse',
           'must_be', 'shown', 'option_of', 'table', 'MIN_SEGMENT_BYTES', 'MAX_SECONDS',
           'MAX_THREADS', 'MIN_WATCH_S', 'MiB']

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
                         launcher='process')),
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
    ('exact_sum', Setting('CHAINERMN_TORUS_EXACT_SUM', 'flag', False,
                          'the exact, order-independent gradient sum (in 64-bit integers): '
                          'the same bits on any P, grid or algorithm',
                          launcher='communicator')),
    ('virtual_ranks', Setting('CHAINERMN_TORUS_VIRTUAL_RANKS', 'count', None,
                              'the job computes as V ranks on any number P <= V of processes '
                              '(each virtual rank its shard, batch, order, random state and '
                              'running statistics; the exact sum): the same bits on any P',
                              launcher='script')),
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
    'seconds': Kind(_seconds, f'a number of seconds > 0 and at most {MAX_SECONDS} (a year)', 'S'),
    'limit': Kind(_limit, f'a number of seconds >= {MIN_WATCH_S:g} (the watcher wakes once a '
                          'second) and '
                  f'at most {MAX_SECONDS} (a year)', 'S'),
    'bytes': Kind(_at_least(0), 'a byte count >= 0 (0 = one message for the whole buffer)',
                  'BYTES'),
    'segment': Kind(_segment, '0 (one message for the whole buffer) or a byte count '
                              f'>= {MIN_SEGMENT_BYTES} '
                    '(each segment costs several MPI calls: at 4-64 B one MLP all-reduce took '
                    '8-60 s)', 'BYTES'),
    'threads': Kind(_threads, f'a thread count >= 1 and <= {MAX_THREADS} (or off)',
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


def must_be(kind, raw):
    return f'must be {KINDS[kind].what}, got {raw!r}'


def parse(kind, raw, source):
    """``raw`` as ``kind``; a ValueError naming ``source`` and what is allowed if it is not."""
    try:
        return KINDS[kind].parse(raw)
    except (TypeError, ValueError):
        raise ConfigError(f'chainermn_torus: {source} {must_be(kind, raw)}') \
            from None


def option_of(key):
    """The command-line option of ``key``: --key-with-dashes."""
    return '--' + key.replace('_', '-')


def shown(value):
    if isinstance(value, bool):
        return 'on' if value else 'off'
    return value


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
        rows.append(f'| `{s.env}` | {default} | {s.meaning} |')
    return '\n'.join(rows)
