#!/usr/bin/env python3
"""`make test-fresh`: CI as CI runs it, on this machine put back to a new machine's state.

A green `.ci/run` on a machine that ran the project before can hide a set-up step a new
machine lacks (issue 71: /run/munge existed wherever munge's package had once started
munged, so every old machine passed and every new one failed). This script forgets first:

1. reset: it stops what the project starts (the Slurm daemons and munged, the emulated
   cluster's namespaces and bridge), then removes what the project's scripts install or
   leave: Slurm's and munge's packages and their state, qemu-user-static and the arm64
   package lists, the dataset package, python3-simgrid, Debian's Open MPI (the cluster
   recipe's test), the packages apt pulled in for
   them, pip's wheel cache, the tuning memory and other caches in $HOME, every `.venv`
   (its `mpi/` prefixes and aarch64 Python inside) and the clones of earlier runs. apt's
   package lists (newer after any `apt-get update`) and its .deb archive stay: the scripts
   update the lists where an install needs it, and a cached .deb skips no install step;
2. clone: `git clone` of main (or --ref) into a new 0700 temporary directory, under
   umask 077;
3. `CI=true bash .ci/run < /dev/null` there, its output shown as it comes and kept in the
   clone's `fresh-run.log`; the phases of `make test` are read off its lines.

It prints each phase's wall time and busy CPU-seconds (all cores, from /proc/stat) and
what it removed, and exits with .ci/run's code. It changes this machine, so it runs only
as root with FRESH=yes, and refuses in one line otherwise. Standard library only: the
venv is among what it removes.
"""
import argparse
import glob
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLONE_PREFIX = 'chainermn-torus-fresh.'
# The Debian packages the project's scripts install (setup.sh, slurm_cluster.sh,
# setup_simgrid.sh, aarch64_root.sh, cluster_recipe.py). What apt pulled in for them goes
# too: the packages that become removable once these are gone, less those that were
# removable before.
PACKAGES = ['slurm-wlm', 'slurmctld', 'slurmd', 'slurm-client', 'munge', 'python3-simgrid',
            'qemu-user-static', 'dataset-fashion-mnist', 'libopenmpi-dev', 'openmpi-bin']
# The state those packages and the scripts leave outside the packages' own files.
STATE_PATHS = ['/run/munge', '/var/lib/munge', '/var/log/munge', '/etc/munge',
               '/var/lib/slurm', '/var/log/slurm', '/var/spool/slurmd', '/var/spool/slurmctld',
               '/etc/slurm', '/run/slurm', '/run/chainermn-torus-slurm',
               '/run/chainermn-torus-cluster', '/usr/share/datasets/fashion-mnist']
USERS = ['munge', 'slurm']        # made by the packages' postinst; a new machine has neither
DAEMONS = ['slurmstepd', 'slurmd', 'slurmctld', 'munged']
HOME = os.path.expanduser('~')
HOME_CACHES = [os.path.join(HOME, p) for p in (
    '.cache/pip',                 # the wheels setup.sh, with_mpi.sh and aarch64_root.sh fetch
    '.cache/chainermn-torus',     # auto's tuning memory (tuning/memory.py)
    '.config/chainermn-torus',    # the planner's network file
    '.cache/matplotlib',          # its font cache, built at its first import
    '.config/matplotlib',         # where it keeps that cache when ~/.cache is not its own
    '.chainer')]                  # Chainer's dataset root
ENV_DROPPED = re.compile(r'^(CHAINERMN_TORUS_|MPI4PY_|I_MPI_|OMPI_|PRTE_|VIRTUAL_ENV$|SLURM_)')


def refuse(why):
    print('fresh_run: refused: ' + why, file=sys.stderr)
    sys.exit(2)


def busy_cpu_seconds():
    """Seconds of CPU time all cores spent busy since boot: /proc/stat's first line, less
    idle and iowait (guest time is already counted in user)."""
    with open('/proc/stat') as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf('SC_CLK_TCK')


class Clock:
    """Phases' wall time and busy CPU-seconds, one row a phase."""

    def __init__(self):
        self.rows = []
        self.mark = (time.monotonic(), busy_cpu_seconds())

    def end(self, name):
        now = (time.monotonic(), busy_cpu_seconds())
        self.rows.append((name, now[0] - self.mark[0], now[1] - self.mark[1]))
        self.mark = now


def run(cmd, check=False, **kw):
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          check=check, **kw)


def remove_path(path, removed):
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)
    else:
        return
    removed.append(path)


def mounted(path):
    """Whether something is mounted at path (a bind mount of the same file system too, which
    os.path.ismount does not see)."""
    with open('/proc/self/mountinfo') as f:
        return any(line.split()[4] == path for line in f)


def installed_packages(names):
    out = run(['dpkg-query', '-W', '-f=${Package} ${db:Status-Status}\n'] + names).stdout
    return [line.split()[0] for line in out.splitlines() if line.endswith(' installed')]


def autoremovable():
    out = run(['apt-get', '-s', 'autoremove', '--purge']).stdout
    return {line.split()[1] for line in out.splitlines() if line.startswith(('Purg ', 'Remv '))}


def stop_services(removed):
    """The Slurm cluster and the emulated nodes through their own `down`, then any daemon
    of theirs still running."""
    if os.path.exists('/run/chainermn-torus-slurm'):
        proc = run(['bash', os.path.join(ROOT, 'scripts', 'slurm_cluster.sh'), 'down'])
        removed.append(f'the Slurm cluster (slurm_cluster.sh down: rc {proc.returncode})')
    netns = run(['ip', 'netns', 'list']).stdout if shutil.which('ip') else ''
    bridge = shutil.which('ip') and run(['ip', 'link', 'show', 'cmtbr0']).returncode == 0
    if os.path.exists('/run/chainermn-torus-cluster') or bridge or \
            re.search(r'^cmt-n\d', netns, re.M):
        proc = run(['bash', os.path.join(ROOT, 'scripts', 'emulate_cluster.sh'), 'down'])
        removed.append(f'the emulated cluster (emulate_cluster.sh down: rc {proc.returncode})')
    for name in DAEMONS:
        if run(['pgrep', '-x', name]).returncode == 0:
            run(['pkill', '-9', '-x', name])
            removed.append('process ' + name)
    lines = open('/etc/hosts').read().splitlines(True)
    kept = [line for line in lines if not line.rstrip().endswith('# chainermn-torus slurm_cluster')]
    if kept != lines:
        with open('/etc/hosts', 'w') as f:
            f.writelines(kept)
        removed.append(f'/etc/hosts: {len(lines) - len(kept)} node lines')


def remove_packages(removed):
    present = installed_packages(PACKAGES)
    if present:
        before = autoremovable()
        run(['apt-get', 'purge', '-y', '-q'] + present, check=True)
        pulled_in = sorted(autoremovable() - before)
        if pulled_in:
            run(['apt-get', 'purge', '-y', '-q'] + pulled_in, check=True)
        removed.append('packages: ' + ' '.join(present))
        if pulled_in:
            removed.append('packages apt pulled in for them: {} ({})'.format(
                len(pulled_in), ' '.join(pulled_in)))
    # Removed, not purged, packages keep their configuration files: purged here too.
    listed = run(['dpkg-query', '-W', '-f=${Package} ${db:Status-Status}\n'] + PACKAGES).stdout
    leftover = [line.split()[0] for line in listed.splitlines() if line.endswith(' config-files')]
    if leftover:
        run(['apt-get', 'purge', '-y', '-q'] + leftover, check=True)
        removed.append('configuration of removed packages: ' + ' '.join(leftover))
    for user in USERS:
        if run(['id', '-u', user]).returncode == 0:
            run(['userdel', user])
            removed.append('user ' + user)
        if run(['getent', 'group', user]).returncode == 0:
            run(['groupdel', user])
            removed.append('group ' + user)
    foreign = run(['dpkg', '--print-foreign-architectures']).stdout.split()
    if 'arm64' in foreign:
        proc = run(['dpkg', '--remove-architecture', 'arm64'])
        removed.append('dpkg architecture arm64' + (f' (refused: {proc.stderr.strip()})'
                                                     if proc.returncode else ''))
    for path in glob.glob('/var/lib/apt/lists/*_binary-arm64_*'):
        os.unlink(path)
        removed.append(path)
    # apt's own archive of .deb files stays: a machine image may come with one filled (this
    # VM's had 1,643), a cached .deb hides no install step (apt still installs it), and
    # which of them the image brought cannot be told from here.


def remove_files(removed):
    for path in STATE_PATHS + HOME_CACHES:
        remove_path(path, removed)
    # Every venv the scripts made here: the checkout's (with its mpi/ prefixes and its
    # aarch64 Python) and the earlier fresh runs' clones whole.
    remove_path(os.path.join(ROOT, '.venv'), removed)
    for path in glob.glob(os.path.join(tempfile.gettempdir(), CLONE_PREFIX + '*')):
        remove_path(path, removed)
    user = pwd.getpwuid(os.geteuid()).pw_name
    remove_path(os.path.join(tempfile.gettempdir(), 'pytest-of-' + user), removed)
    # Folders the above left empty, or that `ip netns` and `mount` made for the emulation.
    for path in (os.path.join(HOME, '.cache'), os.path.join(HOME, '.config'), '/run/netns',
                 '/run/mount'):
        if os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path):
            while mounted(path):   # `ip netns` bind-mounts /run/netns on itself
                if run(['umount', path]).returncode:
                    break
            try:
                os.rmdir(path)
            except OSError as e:
                removed.append(f'{path} (empty; not removed: {e.strerror})')
            else:
                removed.append(path + ' (empty)')


# The lines of `make test` that end its phases, in their order (Makefile, setup.sh,
# setup_simgrid.sh, test_lanes.sh; tests/scripts/test_fresh_run.py checks that those
# scripts still print them). The worlds end with the first pytest summary after their
# heading; the other MPIs' fast sets with the run.
SUMMARY = re.compile(r'^=* ?(\d+ (passed|failed|errors?)\b.* in [\d.]+s.*?) ?=*$')
WORLDS_HEADING = '[test] the MPI worlds'
PHASES = [('set-up (make setup)', re.compile(r'^\[setup\] ok:')),
          ('SimGrid (setup_simgrid.sh)', re.compile(r'^SimGrid: ')),
          ('lanes A and B', re.compile(r'^\[test\] lane A:')),
          ('the MPI worlds', SUMMARY),   # the first summary after WORLDS_HEADING
          ("the other MPIs' fast sets", None)]


class Phases:
    """Reads .ci/run's lines: feed() returns the name of the phase a line ends, or None. A
    phase that printed nothing (SimGrid where it is not installed) is left out."""

    def __init__(self):
        self.next, self.in_worlds, self.summaries = 0, False, []

    def feed(self, text):
        m = SUMMARY.match(text)
        if m:
            self.summaries.append(m.group(1))
        if text.startswith(WORLDS_HEADING):
            self.in_worlds = True
        for j in range(self.next, len(PHASES) - 1):
            name, pattern = PHASES[j]
            if pattern.match(text) and (name != 'the MPI worlds' or self.in_worlds):
                self.next = j + 1
                return name
        return None

    def last(self):
        return PHASES[self.next][0]


def run_ci(clone, clock, log_path):
    env = {k: v for k, v in os.environ.items() if not ENV_DROPPED.match(k)}
    dropped = sorted(k for k in os.environ if ENV_DROPPED.match(k))
    env['CI'] = 'true'
    phases = Phases()
    with open(log_path, 'w') as log:
        proc = subprocess.Popen(['bash', '.ci/run'], cwd=clone, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors='replace', bufsize=1)
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
            ended = phases.feed(line.rstrip('\n'))
            if ended:
                clock.end(ended)
        code = proc.wait()
    clock.end(phases.last())
    return code, phases.summaries, dropped


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--ref', default=os.environ.get('REF', 'main'),
                        help='the branch or tag to clone (default main)')
    parser.add_argument('--json', help='also write the phases, removals and result here')
    parser.add_argument('--reset-only', action='store_true',
                        help='put the machine back and stop: no clone, no run')
    parser.add_argument('--no-reset', action='store_true',
                        help='keep the machine as it is (a warm run, to compare): clone and run')
    args = parser.parse_args(argv)
    if os.geteuid() != 0 or os.environ.get('FRESH') != 'yes':
        refuse('it removes packages, daemons, venvs and caches from this machine; run it as '
               'root with FRESH=yes on a machine you may change (uid {}, FRESH={!r})'.format(
                   os.geteuid(), os.environ.get('FRESH')))
    for tool in ('apt-get', 'dpkg-query', 'git'):
        if not shutil.which(tool):
            refuse(f'needs {tool} (a Debian machine with git)')

    started = time.time()
    clock = Clock()
    removed = []
    if args.no_reset:
        print('[fresh] --no-reset: the machine as it is (a warm run)', flush=True)
    else:
        stop_services(removed)
        remove_packages(removed)
        remove_files(removed)
        print('[fresh] removed: ' + ('nothing: this machine was already as new' if not removed
                                     else '\n[fresh]   '.join([''] + removed)), flush=True)
    clock.end('reset (stop, remove)' if not args.no_reset else 'no reset')
    if args.reset_only:
        print(f'[fresh] reset in {clock.rows[0][1]:.1f} s ({clock.rows[0][2]:.1f} busy CPU-s); '
              '--reset-only: no run')
        return 0

    os.umask(0o077)
    base = tempfile.mkdtemp(prefix=CLONE_PREFIX)          # 0700
    clone = os.path.join(base, 'chainermn-torus')
    proc = run(['git', 'clone', '-q', '--branch', args.ref, ROOT, clone])
    if proc.returncode:
        refuse(f'git clone --branch {args.ref} {ROOT} failed: {proc.stderr.strip()}')
    commit = run(['git', '-C', clone, 'rev-parse', '--short', 'HEAD']).stdout.strip()
    clock.end('clone')
    print(f'[fresh] {args.ref} at {commit} in {clone}: CI=true bash .ci/run < '
          '/dev/null', flush=True)
    code, summaries, dropped = run_ci(clone, clock, os.path.join(base, 'fresh-run.log'))

    total_wall = sum(r[1] for r in clock.rows)
    total_cpu = sum(r[2] for r in clock.rows)
    ci_wall = sum(r[1] for r in clock.rows[2:])
    ci_cpu = sum(r[2] for r in clock.rows[2:])
    verdict = 'passed' if code == 0 else f'FAILED (rc {code})'
    print(f'\n[fresh] {args.ref} at {commit} on {os.cpu_count()} cores, {verdict}')
    print('[fresh] {:<28} {:>8} {:>10}'.format('phase', 'wall s', 'busy CPU-s'))
    for name, wall, cpu in clock.rows:
        print(f'[fresh] {name:<28} {wall:>8.1f} {cpu:>10.1f}')
    print('[fresh] {:<28} {:>8.1f} {:>10.1f}'.format('.ci/run', ci_wall, ci_cpu))
    print('[fresh] {:<28} {:>8.1f} {:>10.1f}'.format('all', total_wall, total_cpu))
    for s in summaries:
        print('[fresh] pytest: ' + s)
    if dropped:
        print('[fresh] not passed to .ci/run from this environment: ' + ' '.join(dropped))
    print(f'[fresh] removed {len(removed)} item(s) before the run (listed above); the clone and '
          'its '
          f'fresh-run.log stay in {base} (the next run removes them)')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'ref': args.ref, 'commit': commit, 'rc': code, 'cores': os.cpu_count(),
                       'reset': not args.no_reset,
                       'started': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(started)),
                       'phases': [{'phase': n, 'wall_s': round(w, 1), 'busy_cpu_s': round(c, 1)}
                                  for n, w, c in clock.rows],
                       'ci_wall_s': round(ci_wall, 1), 'ci_busy_cpu_s': round(ci_cpu, 1),
                       'pytest': summaries, 'removed': removed, 'env_dropped': dropped},
                      f, indent=1)
    return code


if __name__ == '__main__':
    sys.exit(main())
