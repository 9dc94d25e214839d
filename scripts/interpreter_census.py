"""Which Python interpreters a test run starts, and the CPU time each kind spends.

    .venv/bin/python scripts/interpreter_census.py [PYTEST ARGS...]   (default: -q tests)

Runs pytest with a measuring ``sitecustomize.py`` first on PYTHONPATH (the tests' jobs keep
what they find there): every interpreter that ends normally appends its command line and
its own user + system CPU seconds at exit. Ranks that are aborted or killed, mpiexec and its
proxies are not counted. Prints the interpreters by kind (a script's name, a ``-m`` module,
a spawned loader process, pytest itself), most CPU first; docs/development.md, "Where the
full tier's time goes", has one run's table.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Written into the measured interpreters: the command line as started (a loader process
# spawned by multiprocessing reports its parent's sys.argv), CPU seconds at exit.
SITECUSTOMIZE = '''
import atexit, os, resource
try:
    _CMD = open('/proc/self/cmdline', 'rb').read().replace(b'\\0', b' ').decode()
except OSError:
    _CMD = ''
def _log():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    with open({log!r}, 'a') as f:
        f.write('%.3f\\t%s\\n' % (ru.ru_utime + ru.ru_stime, _CMD.replace('\\t', ' ')[:300]))
atexit.register(_log)
'''

PATTERN = re.compile(r'(mpi_workers/\w+\.py|unchanged/\w+\.py|examples/[\w/]+\.py|'
                     r'scripts/\w+\.py|simulation/player\.py)')


def kind(cmd):
    if ' -m pytest' in cmd:
        return 'the pytest process'
    if 'multiprocessing' in cmd:
        return 'loader process (spawn)'
    if 'qemu' in cmd:
        return 'aarch64 under QEMU'
    m = PATTERN.search(cmd)
    if m:
        return m.group(1)
    m = re.search(r' -m ([\w.]+)', cmd)
    if m:
        return '-m ' + m.group(1)
    return 'python -c and others'


def census(log):
    groups = collections.defaultdict(lambda: [0, 0.0])
    with open(log) as f:
        for line in f:
            cpu, _, cmd = line.rstrip('\n').partition('\t')
            groups[kind(cmd)][0] += 1
            groups[kind(cmd)][1] += float(cpu)
    return sorted(groups.items(), key=lambda kv: -kv[1][1])


def main(argv):
    work = tempfile.mkdtemp(prefix='census-')
    log = os.path.join(work, 'interpreters.log')
    with open(os.path.join(work, 'sitecustomize.py'), 'w') as f:
        f.write(SITECUSTOMIZE.format(log=log))
    env = dict(os.environ, PYTHONPATH=work + os.pathsep + os.environ.get('PYTHONPATH', ''))
    code = subprocess.call([sys.executable, '-m', 'pytest'] + (argv or ['-q', 'tests']),
                           cwd=ROOT, env=env)
    rows = census(log)
    print(f'{sum(n for _, (n, _) in rows)} interpreters ended '
          f'normally, {sum(c for _, (_, c) in rows):.0f} CPU-s (pytest exit code {code})')
    print('{:>6} {:>9} {:>6}  kind'.format('count', 'CPU-s', 'each'))
    for name, (n, cpu) in rows:
        print(f'{n:6d} {cpu:9.1f} {cpu / n:6.2f}  {name}')
    return code


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
