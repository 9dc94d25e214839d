"""python scripts/process_changes.py [--tree TREE] [--json FILE]: what each call changes in a
rank's process, on 2 ranks, for the package of TREE (default: this checkout), by
tests/mpi_workers/process_probe.py (this checkout's probe, run against TREE's package): the
state read before and after import (also with a watchdog set), naive, rsap and the optimizer,
and at a launched script's first line against a plain one's. Prints one line per case;
--json writes them."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, 'tests', 'mpi_workers', 'process_probe.py')


def _run(tree, case, launched=False, extra=None):
    out = tempfile.mkdtemp(prefix='process-changes-')
    env = {k: v for k, v in os.environ.items() if not k.startswith('CHAINERMN_TORUS_') and
           k not in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS')}
    env.update(extra or {}, PYTHONPATH=tree, PROBE_OUT=out)
    mpiexec = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
    argv = [mpiexec, '-n', '2', sys.executable] + \
        (['-m', 'chainermn_torus.run'] if launched else []) + [PROBE, case]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=tree)
    if proc.returncode != 0:
        raise SystemExit(f'{tree} {case}: {proc.stderr[-2000:]}')
    return {name[:-5]: json.load(open(os.path.join(out, name))) for name in os.listdir(out)}


def _changed(a, b):
    pools = {p.split(':')[0] for p in a['threads']}
    b = dict(b, threads=[p for p in b['threads'] if p.split(':')[0] in pools])
    return sorted(k for k in a if a[k] != b[k] and k != 'python threads')


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--tree', default=ROOT)
    p.add_argument('--json', default=None)
    args = p.parse_args(argv)
    tree = os.path.abspath(args.tree)
    rows = {}
    for case in ('import', 'naive', 'rsap', 'optimizer'):
        got = _run(tree, case)
        rows[case] = {'after': _changed(got['0.before'], got['0.after'])}
        if '0.undone' in got:
            rows[case]['after undo'] = _changed(got['0.before'], got['0.undone'])
    got = _run(tree, 'import', extra={'CHAINERMN_TORUS_WATCHDOG': '600'})
    rows['import, watchdog set'] = {'after': _changed(got['0.before'], got['0.after'])}
    plain, launched = _run(tree, 'launched'), _run(tree, 'launched', launched=True)
    rows['launched'] = {'after': _changed(plain['0.at-start'], launched['0.at-start'])}
    for case, row in rows.items():
        print('{:21s} {}'.format(case, '; '.join('{}: {}'.format(k, ', '.join(v) or 'nothing')
                                                  for k, v in row.items())))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'tree': tree, 'ranks': 2, 'rank 0': rows}, f, indent=1)


if __name__ == '__main__':
    main()
