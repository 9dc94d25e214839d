#!/usr/bin/env python3
"""docs/cluster.md's "Install with the site's MPI", run as written, in a new directory.

    python3 scripts/cluster_recipe.py DIR [--job] [--json FILE]

The recipe is read from the doc (its first ```bash block under that heading), line for
line, so that what is tested is what a user copies. Debian's Open MPI (`libopenmpi-dev`,
`openmpi-bin`; installed here when missing, root and apt) stands for the site's MPI: the
recipe's `module load ...` line runs as written, and `module` is a function that does what
a site's module does, putting that MPI's `mpicc` and `mpiexec` first on the PATH (through a
folder of links to Debian's `*.openmpi` names, so that another MPI's alternatives cannot
win). The lines run in one bash, `set -eu`, in a copy of this checkout (its tracked and
untracked files, no build output: `pip install ".[cpu]"` builds the wheel there), in an
environment without this project's venv, settings or MPI variables, as a login shell has.

--job then runs a 2-rank MNIST job with rsap under that `mpiexec` in the recipe's venv.
It prints each line's wall time, and with --json writes them, the check's rows and the
job's result. Exit status: the first failing step's. Standard library only: it runs
before any venv exists.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, 'docs', 'cluster.md')
HEADING = "### Install with the site's MPI"
PACKAGES = ['libopenmpi-dev', 'openmpi-bin']     # also in scripts/fresh_run.py's list
TOOLS = ('mpicc', 'mpiexec', 'mpirun')           # Debian names each one TOOL.openmpi
DROPPED = re.compile(r'^(CHAINERMN_TORUS_|MPI4PY_|I_MPI_|OMPI_|PRTE_|PMIX_|SLURM_|'
                     r'VIRTUAL_ENV$|PYTHONPATH$|PYTHONHOME$)')
# What the script writes before each recipe line (to stderr): its number and the time.
MARK = re.compile(r'^@@recipe-line (\d+) (\d+[.,]\d+)$', re.M)


def recipe_lines(path=DOC):
    """The recipe's lines as the doc writes them (the first bash block under HEADING)."""
    with open(path) as f:
        text = f.read()
    at = text.find(HEADING)
    if at < 0:
        raise SystemExit(f'cluster_recipe: {path} has no "{HEADING}" section')
    block = re.search(r'```bash\n(.*?)```', text[at:], re.S)
    if block is None:
        raise SystemExit(f'cluster_recipe: no ```bash block under "{HEADING}" in {path}')
    return [ln for ln in block.group(1).splitlines() if ln.strip()]


def ensure_openmpi():
    """Debian's Open MPI, installed when missing (the packages stay, as Slurm's do:
    scripts/fresh_run.py removes them)."""
    if all(os.path.exists(f'/usr/bin/{t}.openmpi') for t in TOOLS):
        return
    if os.geteuid() != 0 or not shutil.which('apt-get'):
        raise SystemExit('cluster_recipe: Debian\'s Open MPI is missing and this is not root '
                         'with apt-get (apt-get install ' + ' '.join(PACKAGES) + ')')
    env = dict(os.environ, DEBIAN_FRONTEND='noninteractive')
    cmd = ['apt-get', 'install', '-y', '-qq', '--no-install-recommends'] + PACKAGES
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:   # package lists too old for the archive: update, once
        subprocess.run(['apt-get', 'update', '-qq'], env=env, capture_output=True)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f'cluster_recipe: {" ".join(cmd)} failed: {proc.stderr[-2000:]}')


def copy_checkout(dest):
    """This checkout's files as git sees them (tracked and untracked, not ignored)."""
    listed = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others',
                             '--exclude-standard'], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split('\0')
    for rel in filter(None, listed):
        src = os.path.join(ROOT, rel)
        if os.path.isfile(src) and not os.path.islink(src):  # deleted in the tree: skip
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))


def login_env():
    """This environment as a login shell has it: no venv, no project or MPI settings."""
    here = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items() if not DROPPED.match(k)}
    env['PATH'] = os.pathsep.join(p for p in env.get('PATH', '').split(os.pathsep)
                                  if p and os.path.abspath(p) != here
                                  and not os.path.exists(os.path.join(p, 'activate')))
    if os.geteuid() == 0:   # Open MPI's launcher refuses root without both
        env.update(OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1')
    return env


def module_folder(top):
    """What `module load` puts first on the PATH: links to Debian's Open MPI tools."""
    folder = os.path.join(top, 'module', 'bin')
    os.makedirs(folder, exist_ok=True)
    for tool in TOOLS:
        os.symlink(f'/usr/bin/{tool}.openmpi', os.path.join(folder, tool))
    return folder


def script_text(lines, module_bin):
    """The recipe's lines as written, each after a mark that says its start."""
    head = [
        'set -eu',
        # a site's `module load`: its MPI's tools first on the PATH
        'module() {',
        '    echo "[recipe] module $*: Debian\'s Open MPI stands for the site\'s MPI"',
        f'    export PATH="{module_bin}:$PATH"',
        '}',
        'mark() { echo "@@recipe-line $1 $EPOCHREALTIME" >&2; }',
    ]
    body = []
    for i, line in enumerate(lines):
        body += [f'mark {i}', line]
    return '\n'.join(head + body) + '\n'


def line_times(stderr, lines, end):
    """Each recipe line's wall time, from its mark to the next one's (or the end)."""
    starts = [(int(n), float(t.replace(',', '.'))) for n, t in MARK.findall(stderr)]
    return [{'line': lines[n], 'seconds': round((starts[i + 1][1] if i + 1 < len(starts)
                                                 else end) - t0, 1)}
            for i, (n, t0) in enumerate(starts)]


def run_recipe(top):
    ensure_openmpi()
    src = os.path.join(top, 'src')
    copy_checkout(src)
    lines = recipe_lines()
    script = os.path.join(top, 'recipe.sh')
    with open(script, 'w') as f:
        f.write(script_text(lines, module_folder(top)))
    env = login_env()
    t0 = time.time()
    proc = subprocess.run(['bash', script], cwd=src, env=env, capture_output=True, text=True)
    end = time.time()
    out = {'lines': line_times(proc.stderr, lines, end), 'seconds': round(end - t0, 1),
           'returncode': proc.returncode, 'stdout': proc.stdout[-4000:],
           'stderr': proc.stderr[-4000:], 'venv': os.path.join(src, '.venv'), 'src': src,
           'path': os.pathsep.join([os.path.join(top, 'module', 'bin'),
                                    os.path.join(src, '.venv', 'bin'), env['PATH']])}
    return out, env


def activated(result, env):
    """The environment after the recipe's `module load` and `. .venv/bin/activate`."""
    return dict(env, PATH=result['path'], VIRTUAL_ENV=result['venv'])


def run_check(result, env):
    proc = subprocess.run(['chainermn-torus', 'check', '--json'], cwd=result['src'],
                          env=activated(result, env), capture_output=True, text=True,
                          timeout=300)
    text = subprocess.run(['chainermn-torus', 'check'], cwd=result['src'],
                          env=activated(result, env), capture_output=True, text=True,
                          timeout=300).stdout
    rows = json.loads(proc.stdout) if proc.stdout.strip().startswith('[') else None
    return {'returncode': proc.returncode, 'rows': rows, 'text': text,
            'stderr': proc.stderr[-2000:]}


def run_job(result, env, top):
    """2 ranks, rsap, MNIST's first 1,000 images for one epoch, under Open MPI's mpiexec."""
    out = os.path.join(top, 'mnist')
    cmd = ['mpiexec', '-n', '2', 'python', 'examples/mnist/train_mnist.py',
           '--communicator', 'rsap', '--epoch', '1', '--limit', '1000', '--out', out]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=result['src'], env=activated(result, env),
                          capture_output=True, text=True, timeout=600)
    return {'command': ' '.join(cmd), 'returncode': proc.returncode,
            'seconds': round(time.time() - t0, 1), 'out': out,
            'stdout': proc.stdout[-4000:], 'stderr': proc.stderr[-4000:]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('dir', help='a new or empty directory for the copy, the venv and the job')
    ap.add_argument('--job', action='store_true', help='the 2-rank MNIST job after the check')
    ap.add_argument('--json', metavar='FILE')
    args = ap.parse_args(argv)
    top = os.path.abspath(args.dir)
    os.makedirs(top, exist_ok=True)
    if os.listdir(top):
        raise SystemExit(f'cluster_recipe: {top} is not empty')
    result, env = run_recipe(top)
    for row in result['lines']:
        print(f'{row["seconds"]:7.1f} s  {row["line"]}')
    print(f'{result["seconds"]:7.1f} s  the recipe, exit {result["returncode"]}')
    report = {'recipe': result}
    rc = result['returncode']
    if rc:
        print(result['stderr'], file=sys.stderr)
    else:
        report['check'] = check = run_check(result, env)
        print(check['text'], end='')
        rc = check['returncode']
        if args.job and not rc:
            report['job'] = job = run_job(result, env, top)
            print(f'{job["seconds"]:7.1f} s  {job["command"]}, exit {job["returncode"]}')
            rc = job['returncode']
            if rc:
                print(job['stdout'] + job['stderr'], file=sys.stderr)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(report, f, indent=1)
    return rc


if __name__ == '__main__':
    sys.exit(main())
