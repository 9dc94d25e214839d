"""A job script from a Job and its system's description: the common template, the values
every system shares, the environment (modules, then the virtualenv) and the launch line.
Nothing here depends on which system it is: what differs is the System's."""
import os
import shlex
import string
import sys

from chainermn_torus.extensions.checkpoint import arguments, in_memory
from chainermn_torus.tools.jobscripts import systems

__all__ = ['generate', 'launch_line', 'check', 'values']

_TEMPLATE = '''#!/bin/bash
${header}
${workdir_line}${environment}set -euo pipefail
# Raise what the site lets a job raise (open files for many ranks' connections, stack
# for deep recursion); a hard limit below stays as it is.
ulimit -n "$$(ulimit -Hn)" 2>/dev/null || true
ulimit -s unlimited 2>/dev/null || true
${settings}${nodes_lines}# What the ranks apply (chainermn-torus config): compute threads, loader cores, the rank
# count MPI must start (the launcher stops on another: a PMI/launcher mismatch).
export CHAINERMN_TORUS_THREADS=${threads}
${dedicated_line}export CHAINERMN_TORUS_EXPECT_RANKS=${procs}
${grid_line}${watchdog_line}${snapshots_line}echo "chainermn-torus job ${name}: ${nodes_now} node(s) x ${ranks_per_node} rank(s), ${threads} compute thread(s) per rank, communicator ${communicator}, ${mpi} MPI, on $$(hostname) at $$(date)"
echo "python: $$(command -v python) ($$(python -c 'import sys; print(sys.version.split()[0], sys.prefix)'))"
${launch}
'''


def _elapse(hours):
    seconds = int(round(hours * 3600))
    return f'{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}'


def _venv_root(path):
    """The virtualenv's root from its root or its bin directory (as given: the path is the
    cluster's, it need not exist here). ``~/x`` and ``$HOME/x`` stay relative to the home
    directory of whoever runs the job."""
    home = None
    for prefix in ('~/', '$HOME/', '${HOME}/'):
        if path.startswith(prefix):
            home, path = True, path[len(prefix):].rstrip('/')
    if not home:  # a relative path stays relative to the job's directory (local's --workdir)
        path = os.path.normpath(os.path.expanduser(path))
    if os.path.basename(path) == 'bin' or (not home and
                                           os.path.exists(os.path.join(path, 'activate'))):
        path = os.path.dirname(path)
    return '$HOME/' + path if home else path


def _shell_path(path):
    """A path for the script: quoted, with a leading $HOME left to the shell."""
    if path.startswith('$HOME/'):
        return '"$HOME"/' + shlex.quote(path[len('$HOME/'):])
    return shlex.quote(path)


def default_venv():
    """This Python's virtualenv (the usual case: generated on a login node that shares the
    file system), or None outside one."""
    return sys.prefix if sys.prefix != getattr(sys, 'base_prefix', sys.prefix) else None


def _wrap_command(job, system, venv):
    """python script.py ARGS -> python -m chainermn_torus.run --communicator C [--grid G]
    script.py ARGS."""
    command = list(job.command)
    if not command:
        raise ValueError('the training command is missing: put it after "--", e.g. -- python '
                         'examples/mnist/train_mnist.py --epoch 1')
    exe, rest = command[0], command[1:]
    if os.path.basename(exe).startswith('python') and rest and rest[0] not in ('-m', '-c'):
        if system.venv_python and exe == 'python':
            exe = os.path.join(venv or default_venv() or sys.prefix, 'bin', 'python')
        keep = ['--memory-snapshots', str(snapshots_every(job))] \
            if job.elastic and arguments.snapshots_asked(rest) is None else []
        # under --elastic the supervisor sets the virtual ranks for every step
        virtual = ['--virtual-ranks', str(job.virtual_ranks)] \
            if job.virtual_ranks is not None and not job.elastic else []
        return ([exe, '-m', 'chainermn_torus.run', '--communicator', job.communicator] +
                (['--grid', job.grid] if job.grid else []) + keep + virtual + rest)
    return command  # not a python script: run as given (it chooses its communicator)


def snapshots_every(job):
    """--elastic: the K of the steps' snapshots in node memory."""
    return job.memory_snapshots or in_memory.DEFAULT_K


def _here(venv):
    """The virtualenv's path on this machine ($HOME's on this login node)."""
    return os.path.expanduser('~/' + venv[len('$HOME/'):]) if venv.startswith('$HOME/') \
        else venv


def check(job):
    """Every refusal, before anything is written: the system's name, the job's shape, the
    system's own rules, the split of each rank's cores, a --venv that is no virtualenv here.
    Returns the System."""
    system = systems.get(job.system)
    job.check()
    system.check(job)
    system.cores(job)  # the per-rank split must leave a compute core
    if job.venv and not job.venv_unchecked:
        # A login node shares the compute nodes' file system, as a rule: a path with no
        # virtualenv here is a typo, and the job would end at its first line after hours in
        # the queue.
        venv = _venv_root(job.venv)
        if not os.path.isfile(os.path.join(_here(venv), 'bin', 'activate')):
            raise ValueError('--venv {}: no virtualenv there ({} does not exist here); make '
                             'one (make setup VENV=DIR), or give --no-venv-check where the '
                             'path exists only on the compute nodes'.format(
                                 job.venv, os.path.join(_here(venv), 'bin', 'activate')))
    return system


def values(job, system=None):
    """The template values: the common ones, then the system's own."""
    system = system or systems.get(job.system)
    procs = job.procs
    mpi = system.mpi(job)
    per_rank, threads, loader = system.cores(job)
    queue = job.queue or system.default_queue(job)
    queue_line = system.queue_format.format(queue) if queue else '# (the default queue)'
    # Open MPI's mpiexec passes no variable it is not told to (Hydra and srun pass all).
    exported = ['OMP_NUM_THREADS', 'CHAINERMN_TORUS_THREADS', 'CHAINERMN_TORUS_EXPECT_RANKS']
    exported += ['CHAINERMN_TORUS_WATCHDOG'] if job.watchdog else []
    exported += ['CHAINERMN_TORUS_DEDICATED_CORES'] if loader else []
    exported += ['CHAINERMN_TORUS_GRID'] if job.grid else []
    venv = _venv_root(job.venv) if job.venv else default_venv()
    nodes_now, nodes_lines = job.nodes, ''
    if system.allocated_nodes and not job.grid:
        nodes_lines = ('# The ranks follow the allocation: resubmitted on another number of '
                       'nodes, the same\n# script starts that many ranks (--auto-resume '
                       'continues a checkpoint on them).\nNODES={}\n'
                       '[ "$NODES" -ge 1 ] || NODES={}\nPROCS=$((NODES * {}))\n').format(
                           string.Template(system.allocated_nodes).safe_substitute(
                               nodes=job.nodes), job.nodes, job.ranks_per_node)
        procs, nodes_now = '$PROCS', '$NODES'
    out = {
        'name': job.name, 'nodes': job.nodes, 'ranks_per_node': job.ranks_per_node,
        'nodes_lines': nodes_lines, 'nodes_now': nodes_now, 'procs': procs,
        'elapse': _elapse(job.hours), 'threads': threads, 'cpus': per_rank,
        'loader_cores': loader, 'queue': queue, 'queue_line': queue_line,
        'group': job.group, 'mpi': mpi, 'launcher': system.launcher(job, mpi),
        'forward': ''.join(f' -x {v}' for v in exported),
        'communicator': job.communicator, 'venv': venv,
    }
    out.update(system.values(job, out))
    return out


def launch_line(job, vals=None, system=None):
    system = system or systems.get(job.system)
    vals = vals or values(job, system)
    command = _wrap_command(job, system, vals['venv'])
    if job.elastic:  # the supervisor starts each step (tools/elastic.py)
        kind, extra = system.elastic_launcher(vals)
        # A command the launcher does not wrap gets its K through the setting it reads.
        wrapped = '-m chainermn_torus.run' in ' '.join(command)
        setting = '' if wrapped or arguments.snapshots_asked(job.command) is not None else \
            f'CHAINERMN_TORUS_MEMORY_SNAPSHOTS={snapshots_every(job)} '
        launcher = setting + ' '.join([
            'python -m chainermn_torus.tools.cli elastic', '--min-nodes', str(job.min_nodes)]
            + ([] if job.virtual_ranks is None else ['--virtual-ranks', str(job.virtual_ranks)])
            + ['--launcher', kind, '--launcher-args', shlex.quote(extra), '--'])
    else:
        launcher = string.Template(system.launch_template(vals)).substitute(vals)
    return launcher + ' ' + ' '.join(shlex.quote(c) for c in command)


def _environment(job, venv):
    """Modules, then the virtualenv: the python every rank runs must be the venv's."""
    lines = []
    if job.module:
        lines.append('# Modules first: the virtualenv was built against them.')
        lines.append('if ! command -v module >/dev/null 2>&1; then')
        lines.append('    . /etc/profile.d/modules.sh 2>/dev/null || true')
        lines.append('fi')
        lines.extend(f'module load {shlex.quote(m)}' for m in job.module)
    if venv:
        lines.append('# The virtualenv (chainer, mpi4py, chainermn_torus): batch jobs do not '
                     'inherit an activated one.')
        activate = _shell_path(os.path.join(venv, 'bin', 'activate'))
        lines.append(f'[ -f {activate} ] || {{ echo "chainermn-torus job: no virtualenv: {activate} does '
                     'not exist on $(hostname) (--venv)" >&2; exit 2; }')
        lines.append(f'. {activate}')
    else:
        lines.append('# No --venv: the python on PATH after the modules runs the job.')
    return '\n'.join(lines) + '\n'


def generate(job):
    """The whole script for ``job`` (a Job), checked first."""
    system = check(job)
    vals = values(job, system)
    vals['header'] = string.Template(system.header).substitute(vals).rstrip('\n')
    if job.elastic:
        vals['header'] += '\n' + system.elastic_header
    vals['environment'] = _environment(job, vals['venv'])
    vals['settings'] = string.Template(system.settings).substitute(vals)
    vals['launch'] = launch_line(job, vals, system)
    vals['workdir_line'] = system.workdir_line(vals)
    # The grid goes to the launcher as --grid; a command that is not a Python script (it
    # chooses its own communicator) can only be reached through the environment.
    wrapped = '-m chainermn_torus.run' in vals['launch']
    vals['grid_line'] = (f'export CHAINERMN_TORUS_GRID={job.grid}\n'
                         if job.grid and not wrapped else '')
    if job.virtual_ranks is not None and not wrapped and not job.elastic:
        # a command the launcher does not wrap reads the setting
        vals['grid_line'] += f'export CHAINERMN_TORUS_VIRTUAL_RANKS={job.virtual_ranks}\n'
    vals['dedicated_line'] = ('export CHAINERMN_TORUS_DEDICATED_CORES={}\n'.format(
        vals['loader_cores']) if vals['loader_cores'] else '')
    vals['snapshots_line'] = (
        f'# --elastic: each step keeps a snapshot of the trainer in node memory every {arguments.snapshots_asked(job.command) or snapshots_every(job)} '
        'iterations\n# (--memory-snapshots); after a lost node, the next step goes on from '
        'the newest one\n# the nodes left hold, and the snapshots go when the job ends.\n'

        if job.elastic else '')
    vals['watchdog_line'] = (
        '# A rank that stops (a frozen peer) ends the job instead of the time limit.\n'
        f'export CHAINERMN_TORUS_WATCHDOG={job.watchdog:g}\n' if job.watchdog else '')
    return string.Template(_TEMPLATE).substitute(vals)
