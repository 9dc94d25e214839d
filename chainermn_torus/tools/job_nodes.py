"""The nodes a job has, and the step it can run on those left after losing some:
what a supervisor needs before it starts the next MPI step, no MPI here.

Where the nodes come from, the first that is there:

* a host list given (``--hosts n1:2,n2:2``, or hosts one per line in a file);
* Slurm's allocation: ``SLURM_JOB_NODELIST`` expanded by ``scontrol show hostnames``
  (Slurm's own expansion of ``n[1-3,7]``, not a copy of it), with the ranks per node from
  ``SLURM_NTASKS_PER_NODE`` (or ``SLURM_TASKS_PER_NODE``'s first count);
* PBS's node file (``PBS_NODEFILE``: a host once per slot, in order).

``slurm_unavailable`` says which of them Slurm itself already counts out (DOWN, FAIL, not
responding): a supervisor need not wait for those to answer.

``plan`` takes them, the lost ones and the job's rule (``--min-nodes``, the global batch)
and gives the next step's hosts and rank count, or a ``Refusal`` in one line naming what
does not fit.
"""
import collections
import os
import re
import shutil
import subprocess

from chainermn_torus.errors import ConfigError, Refusal

__all__ = ['Node', 'Step', 'parse_hosts', 'from_slurm', 'from_pbs', 'discover', 'plan',
           'NoStep', 'parse_sinfo', 'slurm_unavailable', 'SLURM_SOURCE']

Node = collections.namedtuple('Node', 'host ranks')
Step = collections.namedtuple('Step', 'nodes ranks batch_per_rank')
_HOST = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]*$')
# Ranks one host may be given: a KNL node's 272 hardware threads about four times over. A
# typing slip (host:99999999) once forked 148 ranks in 97 s on a 2-core node before anyone
# could stop it.
MAX_RANKS_PER_HOST = 1024


class NoStep(Refusal, RuntimeError):
    """The nodes left cannot run the job (said in one line)."""


def parse_hosts(text, source='--hosts'):
    """[Node] from ``host:ranks`` items (',' or whitespace between; ``:ranks`` 1 where
    left out), each host once."""
    nodes, seen = [], set()
    for item in re.split(r'[,\s]+', text.strip()):
        if not item:
            continue
        host, _, count = item.partition(':')
        if not _HOST.match(host) or (count and not count.isdigit()) or count == '0':
            raise ConfigError(f'chainermn_torus: {source}: {item!r} is not host[:ranks] (a host '
                              'name, '
                              'then a rank count >= 1)')
        if host in seen:
            raise ConfigError(f'chainermn_torus: {source}: host {host} is given twice')
        if count and int(count) > MAX_RANKS_PER_HOST:
            raise ConfigError(f'chainermn_torus: {source}: {item!r} asks for {int(count)} ranks on '
                              'one host; at '
                              f'most {MAX_RANKS_PER_HOST} (MAX_RANKS_PER_HOST, about four times '
                              'the hardware '
                              'threads of a many-core node) are allowed')
        seen.add(host)
        nodes.append(Node(host, int(count or 1)))
    if not nodes:
        raise ConfigError(f'chainermn_torus: {source}: no host in {text!r}')
    return nodes


def _slurm_ranks(env):
    per = env.get('SLURM_NTASKS_PER_NODE')
    if per and per.isdigit():
        return int(per)
    m = re.match(r'^(\d+)', env.get('SLURM_TASKS_PER_NODE', ''))
    return int(m.group(1)) if m else 1


def from_slurm(env=None, scontrol=None):
    """[Node] of this Slurm allocation, or None outside one. ``scontrol``: its path
    (default: the one on PATH)."""
    env = os.environ if env is None else env
    nodelist = env.get('SLURM_JOB_NODELIST') or env.get('SLURM_NODELIST')
    if not nodelist:
        return None
    exe = scontrol or shutil.which('scontrol')
    if exe is None:
        raise ConfigError(f'chainermn_torus: SLURM_JOB_NODELIST is {nodelist!r} but scontrol is '
                          'not '
                          'on PATH to expand it')
    try:  # Slurm's own variables (SLURM_CONF) as the allocation gives them
        out = subprocess.run([exe, 'show', 'hostnames', nodelist], capture_output=True,
                             text=True, timeout=30, env=dict(os.environ, **{
                                 k: v for k, v in env.items() if k.startswith('SLURM_')}))
    except OSError as e:
        raise ConfigError(f'chainermn_torus: cannot run {exe} to expand '
                          f'SLURM_JOB_NODELIST {nodelist!r}: '
                          f'{e.strerror or e}') from None
    if out.returncode != 0:
        raise ConfigError(f'chainermn_torus: scontrol show hostnames {nodelist} '
                          f'failed: {out.stderr.strip() or out.returncode}')
    ranks = _slurm_ranks(env)
    return [Node(h, ranks) for h in out.stdout.split()]


# sinfo's compact states (%t): a base state and flags. DOWN and FAIL nodes run nothing; '*'
# is "not responding", '~' powered off. FAILING, DRAINING and DRAINED nodes still run what
# they hold: a probe says whether the job's part there lives.
_GONE_STATES = ('down', 'fail')
_GONE_FLAGS = '*~'


def parse_sinfo(text):
    """{host: state} of the hosts in ``sinfo -h -N -o '%N %t'`` output that Slurm counts
    out (a node of several partitions is listed once per partition)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        host, state = parts
        base = state.rstrip('*~#!%$@^-')
        if base in _GONE_STATES or any(f in state for f in _GONE_FLAGS):
            out[host] = state
    return out


def slurm_unavailable(hosts, sinfo=None, timeout=10.0):
    """{host: state} of ``hosts`` that Slurm's controller holds DOWN, FAIL or not
    responding; {} where sinfo is missing or fails (the probe then decides alone)."""
    exe = sinfo or shutil.which('sinfo')
    if exe is None or not hosts:
        return {}
    try:
        out = subprocess.run([exe, '-h', '-N', '-n', ','.join(hosts), '-o', '%N %t'],
                             capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_sinfo(out.stdout) if out.returncode == 0 else {}


def from_pbs(env=None):
    """[Node] of PBS's node file (a host once per slot), or None outside PBS."""
    env = os.environ if env is None else env
    path = env.get('PBS_NODEFILE')
    if not path:
        return None
    counts = collections.OrderedDict()
    with open(path) as f:
        for line in f:
            host = line.strip()
            if host:
                counts[host] = counts.get(host, 0) + 1
    return [Node(h, n) for h, n in counts.items()]


SLURM_SOURCE = 'Slurm (SLURM_JOB_NODELIST)'  # discover's name for Slurm's allocation


def discover(hosts=None, env=None):
    """(nodes, where they came from): ``hosts`` (a ``parse_hosts`` text), else Slurm's
    allocation, else PBS's node file; ConfigError where there is none of them."""
    if hosts:
        return parse_hosts(hosts), '--hosts'
    for find, name in ((from_slurm, SLURM_SOURCE),
                       (from_pbs, 'PBS (PBS_NODEFILE)')):
        nodes = find(env)
        if nodes:
            return nodes, name
    raise ConfigError('chainermn_torus: no nodes to run on: give --hosts host:ranks,..., or '
                      'run inside a Slurm or PBS allocation')


def plan(nodes, lost, global_batch=None, min_nodes=1):
    """The step on ``nodes`` less ``lost`` (host names): a ``Step`` of the nodes left,
    their ranks and the batch per rank that keeps ``global_batch`` (None: not kept). NoStep
    in one line where fewer than ``min_nodes`` are left or the global batch does not split
    evenly over their ranks."""
    unknown = sorted(set(lost) - {n.host for n in nodes})
    if unknown:
        raise ConfigError('chainermn_torus: lost host(s) {} are not in the allocation ({})'
                          .format(', '.join(unknown), ', '.join(n.host for n in nodes)))
    left = [n for n in nodes if n.host not in set(lost)]
    if len(left) < max(min_nodes, 1):
        raise NoStep('chainermn_torus: {} of {} node(s) left ({}), fewer than --min-nodes {}: '
                     'the job ends; lost: {}'.format(
                         len(left), len(nodes), ', '.join(n.host for n in left) or 'none',
                         min_nodes, ', '.join(sorted(lost))))
    ranks = sum(n.ranks for n in left)
    batch = None
    if global_batch is not None:
        if global_batch % ranks:
            works = [p for p in range(1, ranks + 1) if global_batch % p == 0]
            raise NoStep('chainermn_torus: the global batch of {} does not split over the {} '
                         'ranks left on {} (lost: {}); rank counts that divide it: {}'.format(
                             global_batch, ranks, ', '.join(n.host for n in left),
                             ', '.join(sorted(lost)), ', '.join(map(str, works))))
        batch = global_batch // ranks
    return Step(left, ranks, batch)
