#!/usr/bin/env python3
"""A 3-node job loses a node and is resubmitted, with the same command, on the 2 left.

    sudo .venv/bin/python scripts/node_loss.py [--epochs 3] [--out docs/measurements/node-loss]

On the emulated cluster (scripts/emulate_cluster.sh: 3 nodes x 2 ranks, 1 Gbit/s links):

1. ``--seeds`` uninterrupted runs of MNIST on 3 nodes, seeds 0, 1, ... (their range is the
   spread of an uninterrupted run; two runs can agree by chance to
   1e-5, so four are the default);
2. the same command as run 1 (seed 0, --checkpoint-dir, --auto-resume), with node 2 lost
   (``emulate_cluster.sh fail 2``: every process in it killed) once the checkpoint of
   iteration ``--lose-after`` is written; the job ends on the watchdog or MPI's error;
3. the same command again: the allocation now has 2 nodes, so 4 ranks start, resume the
   6-rank checkpoint (global batch kept: 50 x 6 = 75 x 4) and train to the end.

With ``--slurm`` the same happens through the real Slurm (``scripts/slurm_cluster.sh``, the
daemons in the emulated nodes): the job script ``chainermn-torus jobscript --system slurm
--nodes 3`` writes is submitted with ``sbatch --requeue --nodes=2-3``; once the checkpoint is
written every process of node 2 is killed (its slurmd too) and the node set DOWN (what
slurmctld does itself when a node stops answering, after SlurmdTimeout); Slurm requeues the
job, or, where MPI ended it before Slurm saw the node fail, ``scontrol requeue`` does (said
in the result). Slurm keeps the
requeued job's task count (6), so one ``scontrol update JobId=J NumNodes=2 NumTasks=4
StartTime=now`` (the operator's, or a site requeue hook's) lets it start on the two nodes
left; the same script then starts 4 ranks that resume.

The table: each run's test accuracy, ranks, time, and the resumed run's lines about the
resume. The target: the resumed run's accuracy within the range of the uninterrupted runs.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMULATE = os.path.join(ROOT, 'scripts', 'emulate_cluster.sh')
PY = os.path.join(ROOT, '.venv', 'bin', 'python')


def emulate(*args, **kwargs):
    return subprocess.run(['bash', EMULATE] + [str(a) for a in args], **kwargs)


def train_command(args, out, seed, checkpoint=None):
    cmd = [PY, os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py'), '--epoch',
           str(args.epochs), '--unit', str(args.unit), '--batchsize', str(args.batch),
           '--seed', str(seed), '--out', out, '--communicator', 'rsap']
    if checkpoint:
        cmd += ['--checkpoint-dir', checkpoint, '--checkpoint-interval',
                str(args.interval), '--auto-resume']
    return cmd


def run(args, cmd, lose_when=None):
    """Run on the cluster's live nodes; with ``lose_when`` (checkpoint dir, iteration), lose
    node 2 once that checkpoint is complete. Returns (exit code, seconds, output)."""
    env = dict(os.environ, CHAINERMN_TORUS_WATCHDOG=str(args.watchdog))
    t0 = time.time()
    proc = subprocess.Popen(['bash', EMULATE, 'run', '2'] + cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    lost_at = None
    if lose_when:
        directory, iteration = lose_when
        latest = os.path.join(directory, 'latest.json')
        while proc.poll() is None and lost_at is None:
            try:
                with open(latest) as f:
                    done = json.load(f)['iteration']
            except (OSError, ValueError):
                done = 0
            if done >= iteration:
                emulate('fail', 2, check=True)
                lost_at = time.time() - t0
            time.sleep(0.2)
    out, _ = proc.communicate(timeout=args.timeout)
    return proc.returncode, time.time() - t0, out, lost_at


SLURM = os.path.join(ROOT, 'scripts', 'slurm_cluster.sh')


def slurm_job(args, work, env):
    """The Slurm path: (exit code, seconds, the job's output, seconds to the loss,
    the job's scontrol lines)."""
    job = os.path.join(work, 'job.sh')
    out, ck = os.path.join(work, 'slurm-run'), os.path.join(work, 'slurm-ck')
    cmd = train_command(args, out, 0, checkpoint=ck)
    cmd[0] = 'python'  # the script activates the venv
    subprocess.run([PY, '-m', 'chainermn_torus.tools.cli', 'jobscript', '--system', 'slurm',
                    '--nodes', '3', '--ranks-per-node', '2', '--hours', '0.3', '--venv',
                    os.path.join(ROOT, '.venv'), '--name', 'node-loss', '--watchdog',
                    str(args.watchdog), '--output', job, '--'] + cmd, check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    log = os.path.join(work, 'slurm.log')
    submit = subprocess.run(['sbatch', '--parsable', '--requeue', '--nodes=2-3',
                             '--open-mode=append', '-o', log, job], env=env, cwd=ROOT,
                            capture_output=True, text=True, check=True)
    jid = submit.stdout.strip().split(';')[0]
    t0, lost_at, states, adjusted, requeued = time.time(), None, [], None, None

    def show():
        return subprocess.run(['scontrol', '-o', 'show', 'job', jid], env=env,
                              capture_output=True, text=True).stdout

    while time.time() - t0 < args.timeout:
        info = show()
        m = re.search(r'JobState=(\S+)', info)
        if m is None:
            time.sleep(0.3)
            continue
        state = m.group(1)
        nodes = re.search(r' NodeList=(\S*)', info).group(1) or '-'
        restarts = re.search(r'Restarts=(\d+)', info).group(1)
        if not states or states[-1][1:] != (state, nodes, restarts):
            states.append((round(time.time() - t0, 1), state, nodes, restarts))
            print(f'  slurm job {jid}: {state} on {nodes} (restarts {restarts})',
                  flush=True)
        if lost_at is not None and restarts == '0' and state in (
                'FAILED', 'NODE_FAIL', 'COMPLETED', 'CANCELLED'):
            # The job ended before Slurm saw the node fail (MPI noticed first): requeued
            # by hand, as a user or a site's epilog would.
            subprocess.run(['scontrol', 'requeue', jid], env=env, check=True)
            requeued = f'by scontrol requeue after it ended {state}'
            print(f'  scontrol requeue {jid}', flush=True)
            time.sleep(0.3)
            continue
        if lost_at is not None and state == 'PENDING' and restarts != '0' and not adjusted:
            requeued = requeued or 'by Slurm (--requeue, node failure)'
            # Slurm keeps the task count of the first allocation (6) for a requeued job, so
            # it would wait for a third node for ever (ReqNodeNotAvail); one update, the
            # operator's or a site's requeue hook's, lets it start on the 2 nodes left, at
            # once rather than after Slurm's requeue delay (BeginTime, 2 minutes here).
            subprocess.run(['scontrol', 'update', f'JobId={jid}', 'NumNodes=2',
                            'NumTasks=4', 'StartTime=now'], env=env, check=True)
            adjusted = time.time() - t0
            print(f'  scontrol update JobId={jid} NumNodes=2 NumTasks=4 StartTime=now',
                  flush=True)
        if lost_at is None:
            try:
                with open(os.path.join(ck, 'latest.json')) as f:
                    done = json.load(f)['iteration']
            except (OSError, ValueError):
                done = 0
            if done >= args.lose_after:
                # The node goes first (its slurmd with it: a DOWN node whose slurmd still
                # answers would be returned to service, ReturnToService=2), then slurmctld
                # is told, as it would find out itself after SlurmdTimeout.
                emulate('fail', 2, check=True)
                subprocess.run(['scontrol', 'update', 'NodeName=node2', 'State=DOWN',
                                'Reason=lost (scripts/node_loss.py)'], env=env, check=True)
                lost_at = time.time() - t0
        if state in ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'OUT_OF_MEMORY') and \
                (lost_at is not None or state != 'COMPLETED'):
            break
        time.sleep(0.3)
    text = open(log).read() if os.path.exists(log) else ''
    code = 0 if states and states[-1][1] == 'COMPLETED' else 1
    return code, time.time() - t0, text, lost_at, states, out, adjusted, requeued


def accuracy(out_dir):
    with open(os.path.join(out_dir, 'summary.json')) as f:
        return json.load(f)['test_accuracy']


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--epochs', type=int, default=3)
    p.add_argument('--seeds', type=int, default=4, help='uninterrupted runs')
    p.add_argument('--unit', type=int, default=500)
    p.add_argument('--batch', type=int, default=50, help='per rank on 3 nodes x 2 ranks')
    p.add_argument('--interval', type=int, default=100, help='checkpoint every N iterations')
    p.add_argument('--lose-after', type=int, default=300,
                   help='lose node 2 once the checkpoint of this iteration is complete')
    p.add_argument('--watchdog', type=float, default=10)
    p.add_argument('--rate', default='1gbit')
    p.add_argument('--timeout', type=float, default=900)
    p.add_argument('--out', default=None, help='write NAME.json and NAME.md')
    p.add_argument('--slurm', action='store_true',
                   help='the job through the real Slurm, sbatch --requeue (no uninterrupted '
                        'runs: compare with the emulated-cluster table)')
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix='node-loss-')
    rows = []
    if args.slurm:
        return slurm_main(args, work)
    try:
        emulate('down', stdout=subprocess.DEVNULL)
        emulate('up', 3, args.rate, check=True)
        for seed in range(args.seeds):
            out = os.path.join(work, f'whole{seed}')
            code, secs, log, _ = run(args, train_command(args, out, seed))
            if code != 0:
                sys.exit(f'uninterrupted run {seed} failed:\n{log[-3000:]}')
            rows.append({'run': f'uninterrupted, seed {seed}', 'ranks': '3 x 2',
                         'accuracy': accuracy(out), 'seconds': secs})
            print(rows[-1], flush=True)
        ck = os.path.join(work, 'ck')
        out = os.path.join(work, 'lost')
        cmd = train_command(args, out, 0, checkpoint=ck)
        code, secs, log, lost_at = run(args, cmd, lose_when=(ck, args.lose_after))
        if lost_at is None:
            sys.exit(f'the job ended before checkpoint {args.lose_after} ({code}):\n{log[-3000:]}')
        ended = [line for line in log.splitlines() if 'waits for' in line or 'watchdog' in line or
                 'BAD TERMINATION' in line or 'exit code' in line.lower()][-3:]
        rows.append({'run': f'seed 0, node 2 lost after checkpoint {args.lose_after}',
                     'ranks': '3 x 2', 'accuracy': None, 'seconds': secs, 'exit': code,
                     'lost_at_s': lost_at, 'ended_after_loss_s': secs - lost_at,
                     'said': ended})
        print(rows[-1], flush=True)
        code, secs, log, _ = run(args, cmd)  # the same command: 2 nodes are left
        if code != 0:
            sys.exit(f'the resubmitted run failed:\n{log[-3000:]}')
        said = [line.strip() for line in log.splitlines() if 'resumed from' in line]
        rows.append({'run': 'the same command, resubmitted', 'ranks': '2 x 2',
                     'accuracy': accuracy(out), 'seconds': secs, 'said': said})
        print(rows[-1], flush=True)
    finally:
        emulate('down', stdout=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
    whole = [r['accuracy'] for r in rows[:args.seeds]]
    resumed = rows[-1]['accuracy']
    spread = max(whole) - min(whole)
    verdict = {'range': [min(whole), max(whole)], 'spread': spread, 'resumed': resumed,
               'first_two_spread': abs(whole[0] - whole[1]) if len(whole) > 1 else None,
               'within': min(whole) - 1e-12 <= resumed <= max(whole) + 1e-12}
    lines = ['| run | ranks | test accuracy | seconds |', '|---|---|---|---|']
    for r in rows:
        lines.append('| {} | {} | {} | {:.1f} |'.format(
            r['run'], r['ranks'], '-' if r['accuracy'] is None else '{:.5f}'.format(
                r['accuracy']), r['seconds']))
    lines.append('')
    lines.append('The uninterrupted runs: {:.4f} to {:.4f} (spread {:.4f}; the first two '
                 '{:.5f}); the resumed run {:.4f}: {}.'.format(
                     min(whole), max(whole), spread, verdict['first_two_spread'] or 0.0,
                     resumed, 'within their range' if verdict['within'] else
                     'OUTSIDE their range'))
    text = '\n'.join(lines)
    print(text)
    for r in rows[2:]:
        for line in r.get('said', []):
            print('  ' + line)
    if args.out:
        with open(args.out + '.json', 'w') as f:
            json.dump({'args': vars(args), 'rows': rows, 'verdict': verdict}, f, indent=1)
        with open(args.out + '.md', 'w') as f:
            f.write('# Node loss on the emulated cluster (`scripts/node_loss.py`)\n\n' + text +
                    '\n')
    return 0 if verdict['within'] else 1


def slurm_main(args, work):
    subprocess.run(['bash', SLURM, 'down'], stdout=subprocess.DEVNULL)
    emulate('down', stdout=subprocess.DEVNULL)
    try:
        subprocess.run(['bash', SLURM, 'up', '3'], check=True)
        env = dict(os.environ, SLURM_CONF='/run/chainermn-torus-slurm/slurm.conf',
                   UCX_TLS='tcp,self')
        code, secs, log, lost_at, states, out, adjusted, requeued = slurm_job(args, work,
                                                                               env)
        said = [line.strip() for line in log.splitlines() if 'resumed from' in line or
                'chainermn-torus job node-loss' in line or 'test accuracy' in line]
        acc = accuracy(out) if code == 0 else None
    finally:
        subprocess.run(['bash', SLURM, 'down'], stdout=subprocess.DEVNULL)
        emulate('down', stdout=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
    result = {'exit': code, 'seconds': secs, 'lost_at_s': lost_at, 'states': states,
              'updated_at_s': adjusted, 'requeued': requeued,
              'said': said, 'accuracy': acc}
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out + '-slurm.json', 'w') as f:
            json.dump({'args': vars(args), 'result': result}, f, indent=1)
    return code


if __name__ == '__main__':
    sys.exit(main())
