#!/usr/bin/env python3
"""A node lost mid-job on the emulated cluster, and the job going on on the nodes left
(issue 73): ``chainermn-torus elastic`` over 3 nodes x 2 ranks of the MNIST example.

    sudo .venv/bin/python scripts/elastic_cases.py [--cases quick|all|signals|ends|NAME ...]
        [--timing N] [--mpi mpich|impi|openmpi] [--json FILE] [--markdown FILE]

First one uninterrupted 6-rank run with a disk checkpoint every ``K`` iterations, all kept:
the reference. Then each case: the elastic run, whose first step stops on one node at a
chosen point (tests/mpi_workers/elastic_fault.py) and loses that node there
(``emulate_cluster.sh fail``: every process killed, the node out of reach; or ``freeze``:
every process stopped, the node silent). The survivors restore from node memory and train
to the end. The check: their final parameters equal, bit for bit, those of the reference's
disk checkpoint of the restored iteration resumed with ``--auto-resume`` on as many ranks;
nothing of the run is left (no process, nothing in /dev/shm but the lost node's snapshots,
which are gone with a real node; MPICH's topology files in /tmp are counted apart). The
cases run in a mount namespace of
their own with fresh /dev/shm and /tmp, so that what is left there is theirs alone.

Cases ``kill-<first|middle|last>-<allreduce|snapshot|evaluation>``, ``frozen-<node>``
(SIGSTOP of the node: named by the watch after its limit), ``second-loss`` (a second node
killed while the first recovery restores) and ``unchanged-last-evaluation`` (ChainerMN's own
MNIST script under ``chainermn_torus.run --memory-snapshots``: it recovers and trains to the
end; it keeps no disk checkpoint to compare with).

``signals`` (issue 82, P2): SIGTERM and SIGINT to one node's ranks in the all-reduce, a
snapshot's write and the evaluation: the node counts as lost, the run goes on bit for bit,
and the signalled node, still up, keeps nothing of the run. ``ends`` (P5): every way a run
ends (completed, the script's failure, below --min-nodes, SIGTERM or SIGINT to the
supervisor, the supervisor SIGKILLed), each node's /dev/shm listed afterwards: empty.

``slurm``: the job through the real Slurm
(``jobscript --system slurm --elastic``, sbatch; the node lost and set DOWN), which must stay
RUNNING, start its next step on the 2 nodes left and end COMPLETED, bit for bit. ``--timing N``: N
more losses of a killed node (the last node, in the all-reduce), with the recovery's parts, and
beside them the same loss as today: the job ends, is submitted again on the 2 nodes left and resumes
from disk. ``--mpi impi|openmpi``: everything (the reference, the cases, the resumed references)
under that MPI (scripts/with_mpi.sh): Intel MPI's hydra or Open MPI's PRRTE launches the steps,
and the supervisor believes the step's lines, not mpirun's exit code.
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMULATE = os.path.join(ROOT, 'scripts', 'emulate_cluster.sh')
SLURM = os.path.join(ROOT, 'scripts', 'slurm_cluster.sh')
WITH_MPI = os.path.join(ROOT, 'scripts', 'with_mpi.sh')
PY = os.path.join(ROOT, '.venv', 'bin', 'python')
FAULT = os.path.join(ROOT, 'tests', 'mpi_workers', 'elastic_fault.py')
EXAMPLE = os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py')
NODES, RANKS, K = 3, 2, 10
WATCHDOG_S = 3
WHERE = {'first': 0, 'middle': 1, 'last': 2}
AT = {'allreduce': 25, 'snapshot': 30, 'evaluation': 1}
QUICK = ['kill-last-allreduce', 'kill-first-snapshot', 'kill-middle-evaluation']
ALL = [f'kill-{w}-{p}' for p in AT for w in WHERE] + \
    ['frozen-middle', 'frozen-first', 'second-loss', 'unchanged-last-evaluation']
# Issue 82, P2: a signal to one node's ranks (an orderly shutdown of that node, the batch
# system signalling it) in each phase: a lost node, never an end; the run goes on, bit for
# bit, and the signalled node (still up) keeps nothing of the run.
SIGNALS = [f'{sig}-{w}-{p}' for sig in ('sigterm', 'sigint')
           for w, p in (('last', 'allreduce'), ('first', 'snapshot'), ('middle', 'evaluation'))]
# Issue 82, P5: every way a run ends, and what each node's /dev/shm holds afterwards.
ENDS = ['end-complete', 'end-script-failure', 'end-min-nodes', 'end-sigterm-supervisor',
        'end-sigint-supervisor', 'end-supervisor-killed']
UNCHANGED = os.path.join(ROOT, 'tests', 'unchanged', 'chainermn_mnist.py')


def emulate(*args, check=True):
    return subprocess.run(['bash', EMULATE] + [str(a) for a in args], check=check,
                          capture_output=True, text=True)


def fresh_cluster():
    emulate('down', check=False)
    emulate('up', NODES)


def train_args(out, extra=()):
    return [EXAMPLE, '--epoch', '3', '--limit', '12000', '--unit', '100', '--batchsize',
            '50', '--out', out] + list(extra)


def env(**more):
    e = dict(os.environ, CHAINERMN_TORUS_WATCHDOG=str(WATCHDOG_S), OMP_NUM_THREADS='1')
    e.update(more)
    return e


def final_params(out):
    with numpy.load(os.path.join(out, 'model_final.npz'), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def differ(a, b):
    if sorted(a) != sorted(b):
        return 'different arrays'
    return max(float(numpy.max(numpy.abs(a[k].astype(numpy.float64) - b[k]))) for k in a)


def reference_run(work):
    """The uninterrupted 6-rank run, every checkpoint kept."""
    fresh_cluster()
    ckpt = os.path.join(work, 'ref-ckpt')
    proc = subprocess.run(['bash', EMULATE, 'run', str(RANKS), PY] + train_args(
        os.path.join(work, 'ref-out'), ['--checkpoint-dir', ckpt, '--checkpoint-interval',
                                        str(K), '--checkpoint-keep', '100']),
        capture_output=True, text=True, env=env(), timeout=600)
    if proc.returncode != 0:
        raise SystemExit('the reference run failed:\n' + proc.stdout[-2000:] + proc.stderr[-2000:])
    return ckpt


def uninterrupted(work, cache, virtual, unchanged=False):
    """The final parameters of the job never interrupted: the reference's (its own
    ``model_final.npz``), or with ``virtual`` a run of its own with ``--virtual-ranks V``
    (ChainerMN's own script under the launcher where ``unchanged``)."""
    key = ('uninterrupted', virtual, unchanged)
    if key in cache:
        return cache[key]
    if virtual is None and not unchanged:
        cache[key] = final_params(os.path.join(work, 'ref-out'))
        return cache[key]
    fresh_cluster()
    out = os.path.join(work, 'uninterrupted-{}{}'.format(virtual, '-unchanged' if unchanged
                                                         else ''))
    command, more = case_command(out, virtual, unchanged, work)
    proc = subprocess.run(['bash', EMULATE, 'run', str(RANKS), PY] + command,
                          capture_output=True, text=True, env=env(**more), timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f'the uninterrupted run ({key}) failed:\n'
                         f'{proc.stdout[-2000:]}{proc.stderr[-2000:]}')
    cache[key] = final_params(out)
    return cache[key]


def case_command(out, virtual, unchanged, work, in_command=True):
    """(the command each rank runs, its environment's additions): the MNIST example, or
    ChainerMN's own script under the launcher; with ``virtual``, as V virtual ranks (said
    in the command, or, not ``in_command``, by the supervisor)."""
    as_virtual = [] if virtual is None or not in_command else \
        ['--virtual-ranks', str(virtual)]
    if unchanged:  # ChainerMN's own MNIST script under the launcher
        # --virtual-ranks sums exactly: ChainerMN's 'naive' is refused, rsap asked for
        forced = [] if virtual is None else ['--communicator', 'rsap']
        return (['-m', 'chainermn_torus.run', '--memory-snapshots', str(K)] + as_virtual +
                forced + [UNCHANGED, '--epoch', '3', '--limit', '12000', '--unit', '100',
                          '--batchsize', '50', '--out', out],
                {'CHAINER_DATASET_ROOT': dataset_cache(work)})
    return train_args(out, ['--memory-snapshots', str(K), '--restore-from-memory'] +
                      as_virtual), {}


def resumed_reference(work, ckpt, iteration, lost, cache):
    """The reference's checkpoint ``iteration`` resumed with --auto-resume on the nodes
    left after ``lost`` (node numbers): its final parameters."""
    key = (iteration, len(lost))
    if key in cache:
        return cache[key]
    fresh_cluster()
    for n in lost:
        emulate('fail', n)
    copy = tempfile.mkdtemp(prefix='resume-', dir=work)
    os.chmod(copy, 0o700)
    for name in os.listdir(ckpt):
        if re.search(rf'_iter_{iteration}[_.]', name):
            shutil.copy2(os.path.join(ckpt, name), copy)
    out = os.path.join(copy, 'out')
    proc = subprocess.run(['bash', EMULATE, 'run', str(RANKS), PY] + train_args(
        out, ['--checkpoint-dir', copy, '--checkpoint-interval', str(K), '--auto-resume']),
        capture_output=True, text=True, env=env(), timeout=600)
    if proc.returncode != 0 or 'resumed' not in proc.stdout:
        raise SystemExit(f'the resumed reference ({key}) '
                         f'failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}')
    cache[key] = final_params(out)
    return cache[key]


def dataset_cache(work):
    """CHAINER_DATASET_ROOT for chainer.datasets.get_mnist(), filled from Debian's
    Fashion-MNIST (no download)."""
    root = os.path.join(work, 'chainer-datasets')
    if not os.path.isdir(root):
        sys.path.insert(0, ROOT)
        from chainermn_torus.datasets.mnist import write_chainer_cache
        os.makedirs(root)
        write_chainer_cache(root)
    return root


def leftovers(lost, shm_before):
    """What the run left on the machine: processes of an elastic step, new files in
    /dev/shm (but the lost nodes' snapshots: removed here, as they are gone with a real
    node)."""
    import psutil
    procs = []
    for p in psutil.process_iter(['pid']):
        try:
            if 'CHAINERMN_TORUS_ELASTIC_STEP' in p.environ():
                procs.append(p.pid)
        except (psutil.Error, OSError):
            pass
    from chainermn_torus.extensions.checkpoint import snapshot_place
    parent = os.path.basename(snapshot_place.default_parent())
    shm = [n for n in sorted(set(os.listdir('/dev/shm')) - shm_before) if n != parent]
    for path, _, _ in snapshot_place.kept():
        host = snapshot_place.RUN_DIR.match(os.path.basename(path)).group('host')
        if host in [f'node{i}' for i in lost]:
            snapshot_place.remove_run(path)
        else:
            shm.append(path)
    return procs, shm


def signal_ranks(node, signum):
    """``signum`` to the training ranks of emulated node ``node`` (its namespace's
    processes of an elastic step: not its launcher proxy), as a node's orderly shutdown."""
    import psutil
    pids = subprocess.run(['ip', 'netns', 'pids', f'cmt-n{node}'],
                          capture_output=True, text=True).stdout.split()
    hit = []
    for pid in map(int, pids):
        try:
            p = psutil.Process(pid)
            if 'CHAINERMN_TORUS_ELASTIC_STEP' in p.environ() and \
                    any(FAULT in a for a in p.cmdline()):
                p.send_signal(signum)
                hit.append(pid)
        except (psutil.Error, OSError):
            pass
    return hit


def per_node():
    """{host: [run directories]} of every node's /dev/shm (emulated nodes share the
    machine's; a run's directory names its host)."""
    from chainermn_torus.extensions.checkpoint import snapshot_place
    out = {f'node{n}': [] for n in range(NODES)}
    for path, _, _ in snapshot_place.kept():
        host = snapshot_place.RUN_DIR.match(os.path.basename(path)).group('host')
        out.setdefault(host, []).append(os.path.basename(path))
    return out


def end_case(name, work):
    """One way a run ends (``ENDS``), and each node's /dev/shm afterwards: nothing of the
    run may be left (a lost node's snapshots go with the node: removed here, and said)."""
    import psutil
    fresh_cluster()
    mark = os.path.join(work, name + '.mark')
    out = os.path.join(work, name + '-out')
    for path in (mark,):
        if os.path.exists(path):
            os.remove(path)
    shutil.rmtree(out, ignore_errors=True)
    shm_before = set(os.listdir('/dev/shm'))
    node, phase, options = 2, 'allreduce', []
    if name == 'end-complete':
        node = 9  # no node of that number: nothing stops
    elif name == 'end-script-failure':
        phase = 'raise'
    elif name == 'end-min-nodes':
        options = ['--min-nodes', str(NODES)]
    argv = ['bash', EMULATE, 'elastic', str(RANKS)] + options + [
        '--', PY, FAULT, str(node), phase, str(AT['allreduce']), mark, '--'] + train_args(
            out, ['--memory-snapshots', str(K)])
    log = open(os.path.join(work, name + '.log'), 'w')
    start = time.time()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env())
    while not os.path.exists(mark) and proc.poll() is None and time.time() - start < 300:
        time.sleep(0.05)
    lost = []
    if os.path.exists(mark) and name != 'end-script-failure':
        time.sleep(1.0)  # the other nodes wait in the all-reduce; snapshots are kept
        if name == 'end-min-nodes':
            emulate('fail', node)
            lost = [node]
        elif name == 'end-supervisor-killed':
            proc.kill()
        else:
            proc.send_signal(signal.SIGTERM if 'sigterm' in name else signal.SIGINT)
    try:
        proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    # A killed supervisor's guard (its own session) ends the step and cleans up after it.
    deadline = time.time() + 120
    while time.time() < deadline and any(
            'tools.cli elastic' in ' '.join(p.info['cmdline'] or [])
            for p in psutil.process_iter(['cmdline'])):
        time.sleep(0.2)
    log.close()
    text = open(log.name).read()
    shm_by_node = per_node()
    procs, shm = leftovers(lost, shm_before)
    emulate('down', check=False)
    expected = {'end-complete': lambda c: c == 0 and 'training is complete' in text,
                'end-script-failure': lambda c: c != 0 and 'every node answers' in text,
                'end-min-nodes': lambda c: c != 0 and 'fewer than --min-nodes' in text,
                'end-sigterm-supervisor': lambda c: c != 0,
                'end-sigint-supervisor': lambda c: c != 0,
                'end-supervisor-killed': lambda c: 'ended without a word (killed)' in text}
    result = {'case': name, 'exit_code': proc.returncode, 'lost_nodes': lost,
              'shm_by_node': shm_by_node, 'processes_left': procs, 'shm_left': shm,
              'tmp_left': [], 'tail': text[-1500:]}
    result['ok'] = expected[name](proc.returncode) and not procs and not shm and not any(
        dirs for host, dirs in shm_by_node.items()
        if host not in [f'node{n}' for n in lost])
    return result


def run_case(name, work, ckpt, cache, virtual=None):
    """One case: the elastic run with its loss, then the check (``virtual``: every step as
    V virtual ranks, and the check against the run never interrupted)."""
    fresh_cluster()
    kind, where, phase = (name.split('-') + [None, None])[:3]
    if name == 'second-loss':
        kind, where, phase = 'second', 'last', 'allreduce'
    phase = phase or 'allreduce'  # a frozen node: stopped in the all-reduce
    node = WHERE[where]
    mark = os.path.join(work, name + '.mark')
    out = os.path.join(work, name + '-out')
    report = os.path.join(work, name + '.json')
    for path in (mark, report):
        if os.path.exists(path):
            os.remove(path)
    shutil.rmtree(out, ignore_errors=True)
    tmp_before = set(glob.glob('/tmp/hydra_hwloc_xmlfile_*'))
    shm_before = set(os.listdir('/dev/shm'))
    # the supervisor's --virtual-ranks V sets it for every step (the command says nothing)
    command, more = case_command(out, virtual, kind == 'unchanged', work, in_command=False)
    argv = ['bash', EMULATE, 'elastic', str(RANKS), '--report', report] + (
        [] if virtual is None else ['--virtual-ranks', str(virtual)]) + [
        '--', PY, FAULT, str(node), phase, str(AT[phase]), mark, '--'] + command
    log = open(os.path.join(work, name + '.log'), 'w')
    start = time.time()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env(**more))
    while not os.path.exists(mark) and proc.poll() is None and time.time() - start < 300:
        time.sleep(0.05)
    lost = [node]
    if kind in ('sigterm', 'sigint'):  # the node stays up: nothing of the run may stay
        signal_ranks(node, signal.SIGTERM if kind == 'sigterm' else signal.SIGINT)
    else:
        emulate('freeze' if kind == 'frozen' else 'fail', node)
    lost_at = time.time()
    if kind == 'second':  # the first node, while the first recovery's step restores
        second = 0
        while proc.poll() is None and time.time() - start < 300:
            with open(log.name) as f:
                if f.read().count('snapshots in node memory are kept in') >= 2:
                    break
            time.sleep(0.01)
        emulate('fail', second)
        lost.append(second)
    try:
        proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()
    text = open(log.name).read()
    rep = json.load(open(report)) if os.path.exists(report) else {}
    signalled = kind in ('sigterm', 'sigint')
    shm_by_node = per_node() if signalled else None
    procs, shm = leftovers([] if signalled else lost, shm_before)
    tmp_left = sorted(set(glob.glob('/tmp/hydra_hwloc_xmlfile_*')) - tmp_before)
    emulate('down', check=False)  # a frozen node's processes go with it
    result = {'case': name, 'exit_code': proc.returncode, 'lost_nodes': lost,
              'recoveries': rep.get('recoveries', []), 'lost': rep.get('lost'),
              'processes_left': procs, 'shm_left': shm, 'tmp_left': tmp_left,
              'tail': text[-1500:]}
    if signalled:
        result['shm_by_node'] = shm_by_node
        result['said_lost'] = bool(re.search(rf'node \S+ lost \({kind.upper()} reached its '
                                             r'rank', text))
    recs = rep.get('recoveries', [])
    restored = [r for r in recs if r.get('iteration') is not None]
    if kind == 'unchanged':  # no disk checkpoint of its own to compare with: it recovers,
        # trains to the end and leaves nothing (the restore is the examples' code path)
        result['iteration'] = restored[-1]['iteration'] if restored else None
        result['seconds_to_first_step'] = restored[-1]['first_step'] - lost_at \
            if restored and restored[-1].get('first_step') else None
        result['ok'] = proc.returncode == 0 and bool(restored) and \
            'training is complete' in text and not procs and not shm
        if virtual is not None:   # as V virtual ranks: the uninterrupted run's bits
            compare_uninterrupted(result, out, uninterrupted(work, cache, virtual, True))
            result['ok'] = result['ok'] and result['equal_to_uninterrupted']
        return result
    if proc.returncode != 0 or not restored or not os.path.exists(
            os.path.join(out, 'model_final.npz')):
        result['ok'] = False
        return result
    last = restored[-1]
    result['iteration'] = last['iteration']
    result['seconds_to_first_step'] = last['first_step'] - lost_at if last.get('first_step') \
        else None
    result['parts'] = parts(last, lost_at) if kind != 'second' else None
    compare_uninterrupted(result, out, uninterrupted(work, cache, virtual))
    if virtual is not None:   # the claim: no trace of the loss
        result['max_abs_difference'] = result['max_abs_difference_to_uninterrupted']
        result['compared_with'] = 'the same job never interrupted'
    else:   # the claim: a resume on fewer ranks
        ref = resumed_reference(work, ckpt, last['iteration'], lost, cache)
        result['max_abs_difference'] = differ(final_params(out), ref)
        result['compared_with'] = 'a disk checkpoint of the restored iteration resumed on ' \
            'the ranks left'
    result['virtual_ranks'] = virtual
    # MPICH's launcher topology files in /tmp are reported, not failed on: a launcher
    # proxy killed with its step leaves its own (so do some whole runs on the emulated
    # cluster, and the fault matrix reports them likewise); the nodes remove those they
    # can attribute (tools/elastic_node.remove_dead_topology).
    result['ok'] = result['max_abs_difference'] == 0.0 and not procs and not shm and \
        result.get('said_lost', True)
    return result


def compare_uninterrupted(result, out, reference):
    """``equal_to_uninterrupted`` and the max abs difference to the job never interrupted,
    into ``result``: true only with virtual ranks (otherwise the survivors sum in another
    order and their batch is other)."""
    gap = differ(final_params(out), reference) if os.path.exists(
        os.path.join(out, 'model_final.npz')) else 'no model_final.npz'
    result['max_abs_difference_to_uninterrupted'] = gap
    result['equal_to_uninterrupted'] = gap == 0.0


def slurm_case(work, ckpt, cache, name='slurm', virtual=None):
    """The same 3 x 2 job through the real Slurm (scripts/slurm_cluster.sh): the script
    ``chainermn-torus jobscript --system slurm --elastic`` writes, submitted with sbatch;
    node 2 lost in the all-reduce (every process killed, then set DOWN, as slurmctld does
    after SlurmdTimeout). The job must stay RUNNING, go on on the 2 nodes left and end
    COMPLETED, bit for bit as the disk resume.

    ``slurm-unchanged`` (issue 82): ChainerMN's own MNIST script (its scatter_dataset
    unseeded, as upstream) in a script jobscript writes for it (no option of its own: the
    launch line keeps snapshots, ``--memory-snapshots K``), losing node 2 the same way; then
    the same script without a loss, which must end COMPLETED with exit code 0. It has no disk
    checkpoint to compare with: it must recover, train to the end and leave nothing."""
    unchanged = name == 'slurm-unchanged'
    emulate('down', check=False)
    subprocess.run(['bash', SLURM, 'up', str(NODES)], check=True, capture_output=True)
    conf = {'SLURM_CONF': '/run/chainermn-torus-slurm/slurm.conf', 'UCX_TLS': 'tcp,self'}
    if unchanged:
        conf['CHAINER_DATASET_ROOT'] = dataset_cache(work)
    e = env(**conf)

    def submit(tag, fault_node):
        mark, out = os.path.join(work, tag + '.mark'), os.path.join(work, tag + '-out')
        job, log = os.path.join(work, tag + '-job.sh'), os.path.join(work, tag + '.log')
        if unchanged:
            script = [UNCHANGED, '--epoch', '3', '--limit', '12000', '--unit', '100',
                      '--batchsize', '50', '--out', out]
            keep = ['--memory-snapshots', str(K)]
        else:
            script = train_args(out, ['--memory-snapshots', str(K), '--restore-from-memory'])
            keep = []
        subprocess.run([PY, '-m', 'chainermn_torus.tools.cli', 'jobscript', '--system',
                        'slurm', '--nodes', str(NODES), '--ranks-per-node', str(RANKS),
                        '--hours', '0.1', '--venv', os.path.join(ROOT, '.venv'), '--elastic'] +
                       keep + ([] if virtual is None else ['--virtual-ranks', str(virtual)]) +
                       ['--output', job, '--', 'python', FAULT, str(fault_node),
                               'allreduce', str(AT['allreduce']), mark, '--'] + script,
                       check=True, capture_output=True, env=e, cwd=ROOT)
        shm_before = set(os.listdir('/dev/shm'))
        jid = subprocess.run(['sbatch', '--parsable', '-o', log, job], check=True, env=e,
                             cwd=ROOT, capture_output=True, text=True
                             ).stdout.strip().split(';')[0]
        start, states, lost_at = time.time(), [], None
        while time.time() - start < 600:
            info = subprocess.run(['scontrol', '-o', 'show', 'job', jid], env=e,
                                  capture_output=True, text=True).stdout
            state = (re.findall(r'JobState=(\S+)', info) or ['?'])[0]
            code = (re.findall(r'ExitCode=(\S+)', info) or ['?'])[0]
            if not states or states[-1][1] != state:
                states.append((round(time.time() - start, 1), state))
            if lost_at is None and os.path.exists(mark):
                emulate('fail', 2)
                subprocess.run(['scontrol', 'update', 'NodeName=node2', 'State=DOWN',
                                'Reason=lost (scripts/elastic_cases.py)'], env=e, check=True)
                lost_at = time.time()
                states.append((round(lost_at - start, 1), 'node2 lost, set DOWN'))
            if state in ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'NODE_FAIL'):
                break
            time.sleep(0.2)
        text = open(log).read() if os.path.exists(log) else ''
        procs, shm = leftovers([2] if lost_at else [], shm_before)
        return {'states': states, 'exit_code': code, 'text': text, 'lost_at': lost_at,
                'out': out, 'processes_left': procs, 'shm_left': shm}

    run = submit(name, 2)
    text, lost_at = run['text'], run['lost_at']
    whole = None
    if unchanged:  # on the whole cluster again (node2 is DOWN, and lost in the emulation)
        subprocess.run(['bash', SLURM, 'down'], capture_output=True)
        emulate('down', check=False)
        subprocess.run(['bash', SLURM, 'up', str(NODES)], check=True, capture_output=True)
        whole = submit(name + '-no-loss', 9)
    subprocess.run(['bash', SLURM, 'down'], capture_output=True)
    restored = re.search(r'resumed from node memory \(\S+\) at iteration (\d+)', text)
    first = re.search(r'first step after the restore is done \(iteration \d+\) at ([0-9.]+)',
                      text)
    procs, shm = run['processes_left'], run['shm_left']
    result = {'case': name + '-kill-last-allreduce', 'states': run['states'],
              'exit_code': run['exit_code'], 'processes_left': procs, 'shm_left': shm,
              'tmp_left': [], 'tail': text[-1500:],
              'step_on_two_nodes': 'step 1 on node0, node1 (4 ranks)' in text,
              'iteration': int(restored.group(1)) if restored else None,
              'seconds_to_first_step': float(first.group(1)) - lost_at
              if first and lost_at else None}
    final = [st for _, st in run['states'] if st not in ('node2 lost, set DOWN',)]
    result['stayed_running'] = final[-2:] == ['RUNNING', 'COMPLETED']
    trained = os.path.exists(os.path.join(run['out'], 'model_final.npz'))
    if unchanged:
        result['no_loss'] = {k: whole[k] for k in ('states', 'exit_code', 'processes_left',
                                                   'shm_left')}
        result['no_loss']['complete'] = 'training is complete' in whole['text']
        result['ok'] = result['stayed_running'] and result['step_on_two_nodes'] and \
            result['iteration'] is not None and trained and not procs and not shm and \
            [st for _, st in whole['states']][-1:] == ['COMPLETED'] and \
            whole['exit_code'] == '0:0' and result['no_loss']['complete'] and \
            not whole['processes_left'] and not whole['shm_left']
        if virtual is not None and trained:   # the job without the loss: the same bits
            compare_uninterrupted(result, run['out'], final_params(whole['out']))
            result['ok'] = result['ok'] and result['equal_to_uninterrupted']
        return result
    if result['iteration'] is None or not trained:
        result['ok'] = False
        return result
    if virtual is not None:   # no trace of the loss
        compare_uninterrupted(result, run['out'], uninterrupted(work, cache, virtual))
        result['max_abs_difference'] = result['max_abs_difference_to_uninterrupted']
    else:
        ref = resumed_reference(work, ckpt, result['iteration'], [2], cache)
        result['max_abs_difference'] = differ(final_params(run['out']), ref)
    result['virtual_ranks'] = virtual
    result['ok'] = result['max_abs_difference'] == 0.0 and result['stayed_running'] and \
        result['step_on_two_nodes'] and not procs and not shm
    return result


def parts(rec, lost_at):
    """The recovery split: detection (loss to the step's end), teardown (the nodes asked,
    what the old step left ended), relaunch (the new step's start to its snapshot
    extension: Python, Chainer, MPI, the data), restore, the first step."""
    def span(a, b):
        return None if rec.get(a) is None or rec.get(b) is None else rec[b] - rec[a]
    out = {'detection': rec['ended'] - lost_at, 'teardown': span('ended', 'probed'),
           'relaunch': span('launched', 'keeping'), 'restore': span('keeping', 'restored'),
           'first_step': span('restored', 'first_step')}
    return out


def resubmission(work):
    """Today's path: the job loses the last node in the all-reduce and ends; the same
    command is submitted again on the 2 nodes left and resumes from its disk checkpoint.
    Seconds from the loss to the end of the job, and from the new job's start to its first
    step (the queue's wait is not in it)."""
    fresh_cluster()
    ckpt = tempfile.mkdtemp(prefix='resubmit-', dir=work)
    os.chmod(ckpt, 0o700)
    mark = os.path.join(ckpt, 'mark')
    out = os.path.join(ckpt, 'out')
    args = train_args(out, ['--checkpoint-dir', ckpt, '--checkpoint-interval', str(K),
                            '--auto-resume'])
    e = env(CHAINERMN_TORUS_ELASTIC_STEP='00000000:0')  # step 0: the fault arms
    proc = subprocess.Popen(['bash', EMULATE, 'run', str(RANKS), PY, FAULT, '2', 'allreduce',
                             str(AT['allreduce']), mark, '--'] + args,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)
    start = time.time()
    while not os.path.exists(mark) and proc.poll() is None and time.time() - start < 300:
        time.sleep(0.05)
    emulate('fail', 2)
    lost_at = time.time()
    proc.communicate(timeout=600)
    ended = time.time()
    again = time.time()
    second = subprocess.run(['bash', EMULATE, 'run', str(RANKS), PY] + args,
                            capture_output=True, text=True, timeout=600,
                            env=env(CHAINERMN_TORUS_ELASTIC_STEP='00000000:1'))
    m = re.search(r'first step after the restore is done \(iteration \d+\) at ([0-9.]+)',
                  second.stdout)
    emulate('down', check=False)
    return {'job_end': ended - lost_at,
            'restart_to_first_step': float(m.group(1)) - again if m else None,
            'exit_code': second.returncode}


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--cases', nargs='*', default=['quick'])
    p.add_argument('--timing', type=int, default=0, metavar='N')
    p.add_argument('--mpi', choices=('mpich', 'impi', 'openmpi'), default='mpich',
                   help='the MPI of every run (scripts/with_mpi.sh; default: mpich)')
    p.add_argument('--virtual-ranks', type=int, default=None, metavar='V',
                   help='every case\'s steps as V virtual ranks (chainermn-torus elastic '
                        '--virtual-ranks V), each checked against the same job never '
                        'interrupted: equal_to_uninterrupted')
    p.add_argument('--json', default=None)
    p.add_argument('--markdown', default=None)
    p.add_argument('--work', default=None, help='keep the runs here, outside /tmp (default: '
                                                'a temporary directory, removed)')
    p.add_argument('--inside', action='store_true', help=argparse.SUPPRESS)
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit('elastic_cases: needs root (the emulated cluster)')
    if args.virtual_ranks is not None and args.virtual_ranks < NODES * RANKS:
        p.error(f'--virtual-ranks {args.virtual_ranks}: at least the first step\'s '
                f'{NODES * RANKS} ranks')
    if args.virtual_ranks is not None and any(
            c in ('ends', 'signals') or c in ENDS or c in SIGNALS for c in args.cases):
        p.error('--virtual-ranks runs the loss cases (quick, all, their names, slurm, '
                'slurm-unchanged); signals and ends are run without it')
    if any(c.startswith('slurm') for c in args.cases) and args.mpi != 'mpich':
        p.error(f"--cases slurm runs with the default MPI (mpich), not --mpi {args.mpi}")
    if not args.inside:
        return outside(args)
    # In a mount namespace of its own with fresh tmpfs on /dev/shm and /tmp (the emulated
    # nodes' namespaces are made from it): whatever is there afterwards is the run's, not a
    # test's beside it (make test's other lane shares the machine's).
    # A checkout (and its venv) under /tmp, as make test-fresh's clone is, is kept: the
    # folder of /tmp holding it is bound back over the fresh tmpfs, from a descriptor
    # opened before.
    kept = {}
    for path in (ROOT, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))):
        parts = os.path.realpath(path).split(os.sep)
        if len(parts) > 2 and parts[1] == 'tmp':
            top = os.sep.join(parts[:3])
            kept.setdefault(top, os.open(top, os.O_PATH | os.O_DIRECTORY))
    for where in ('/dev/shm', '/tmp'):
        subprocess.run(['mount', '-t', 'tmpfs', '-o', 'mode=1777', 'tmpfs', where], check=True)
    for top, fd in kept.items():
        os.mkdir(top, 0o700)
        # --no-canonicalize: mount would resolve the descriptor's link to the name, which
        # now names the empty folder just made.
        subprocess.run(['mount', '--no-canonicalize', '--bind', f'/proc/self/fd/{fd}',
                        top], check=True, pass_fds=(fd,))
        os.close(fd)
    names = []
    for c in args.cases:
        names += QUICK if c == 'quick' else ALL if c == 'all' else SIGNALS \
            if c == 'signals' else ENDS if c == 'ends' else [c]
    work = args.work or tempfile.mkdtemp(prefix='elastic-cases-')
    os.makedirs(work, exist_ok=True)
    os.chmod(work, 0o700)
    results, cache = [], {}
    try:
        ckpt = reference_run(work)
        for name in names:
            r = slurm_case(work, ckpt, cache, name, args.virtual_ranks) \
                if name.startswith('slurm') else \
                end_case(name, work) if name in ENDS else \
                run_case(name, work, ckpt, cache, args.virtual_ranks)
            results.append(r)
            print('{:26s} ok={} restored at {} max abs diff {} to first step {} equal to '
                  'uninterrupted {}'.format(
                      name, r['ok'], r.get('iteration'), r.get('max_abs_difference'),
                      _s(r.get('seconds_to_first_step')), r.get('equal_to_uninterrupted')),
                  flush=True)
        timing = []
        for i in range(args.timing):
            r = run_case('kill-last-allreduce', work, ckpt, cache, args.virtual_ranks)
            r['case'] = f'timing-{i}'
            timing.append(r)
            print('timing {:2d} ok={} to first step {} parts {}'.format(
                i, r['ok'], _s(r.get('seconds_to_first_step')),
                {k: _s(v) for k, v in (r.get('parts') or {}).items()}), flush=True)
        today = [resubmission(work) for _ in range(3 if args.timing else 0)]
    finally:
        emulate('down', check=False)
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(timing, today)
    data = {'machine': machine(), 'mpi': os.environ.get('CHAINERMN_TORUS_MPI', 'mpich'),
            'nodes': NODES, 'ranks_per_node': RANKS, 'snapshot_every': K,
            'watchdog_s': WATCHDOG_S, 'virtual_ranks': args.virtual_ranks, 'cases': results,
            'timing': timing, 'today': today,
            'summary': summary}
    print(json.dumps(summary, indent=1))
    print(RESULT + json.dumps(data), flush=True)
    return 0 if all(r['ok'] for r in results + timing) else 1


RESULT = 'ELASTIC-CASES-RESULT '


def outside(args):
    """Run the cases in a private mount namespace (``--inside``), passing its lines on;
    write its result where asked (paths on the machine's /tmp are not seen inside)."""
    mpi = [] if args.mpi == 'mpich' else ['bash', WITH_MPI, args.mpi]
    argv = mpi + ['unshare', '-m', '--propagation', 'private', sys.executable,
            os.path.abspath(__file__), '--inside', '--cases'] + args.cases + [
                '--timing', str(args.timing)] + (['--work', args.work] if args.work else []) + (
                    [] if args.virtual_ranks is None else
                    ['--virtual-ranks', str(args.virtual_ranks)])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    data = None
    for line in proc.stdout:
        if line.startswith(RESULT):
            data = json.loads(line[len(RESULT):])
        else:
            sys.stdout.write(line)
            sys.stdout.flush()
    code = proc.wait()
    if data is None:
        return code or 1
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(data, f, indent=1)
    if args.markdown:
        with open(args.markdown, 'w') as f:
            f.write(markdown(data))
    return code


def _s(v):
    return None if v is None else round(v, 2)


def summarize(timing, today):
    if not timing:
        return {}
    ok = [r for r in timing if r.get('seconds_to_first_step') is not None]
    total = [r['seconds_to_first_step'] for r in ok]
    out = {'losses': len(timing), 'recovered': len(ok),
           'median_s': statistics.median(total) if total else None,
           'max_s': max(total) if total else None, 'parts_median_s': {}}
    for part in ('detection', 'teardown', 'relaunch', 'restore', 'first_step'):
        vals = [r['parts'][part] for r in ok if r['parts'].get(part) is not None]
        out['parts_median_s'][part] = statistics.median(vals) if vals else None
    if today:
        t = [d['job_end'] + d['restart_to_first_step'] for d in today
             if d['restart_to_first_step'] is not None]
        out['today_median_s'] = statistics.median(t) if t else None
        out['today_parts_median_s'] = {
            'job_end': statistics.median(d['job_end'] for d in today),
            'restart_to_first_step': statistics.median(
                d['restart_to_first_step'] for d in today if d['restart_to_first_step'])}
    return out


def machine():
    import platform
    cpu = ''
    try:
        cpu = next(line.split(':', 1)[1].strip() for line in open('/proc/cpuinfo')
                   if line.startswith('model name'))
    except (OSError, StopIteration):
        pass
    return f'{os.cpu_count()} cores, {cpu}, {platform.platform()}'


def markdown(data):
    lines = ['# A node lost mid-job: the elastic run\'s cases', '',
             'Machine: {}. `scripts/elastic_cases.py`: {} nodes x {} ranks (MNIST) under {}, '
             'snapshots in node memory every {} iterations, watchdog {} s.'.format(
                 data['machine'], data['nodes'], data['ranks_per_node'],
                 {'mpich': 'MPICH', 'impi': 'Intel MPI', 'openmpi': 'Open MPI'}.get(
                     data.get('mpi'), data.get('mpi')),
                 data['snapshot_every'], data['watchdog_s']) + (
                 '' if not data.get('virtual_ranks') else
                 ' Every step as {} virtual ranks (`chainermn-torus elastic --virtual-ranks '
                 '{}`): each case against the same job never interrupted.'.format(
                     data['virtual_ranks'], data['virtual_ranks'])), '',
             '| case | as it must | exit code | restored at | max abs difference | equal to '
             'the run never interrupted (max abs difference) | loss to first '
             'step (s) | left behind (processes, /dev/shm) | run directories in each node\'s '
             '/dev/shm after | MPICH topology files in /tmp |',
             '|---|---|--:|--:|--:|---|--:|---|---|--:|']
    for r in data['cases'] + data['timing']:
        left = r['processes_left'] + r['shm_left']
        nodes = r.get('shm_by_node')
        uninterrupted = '-' if 'equal_to_uninterrupted' not in r else '{} ({})'.format(
            'yes' if r['equal_to_uninterrupted'] else 'no',
            r.get('max_abs_difference_to_uninterrupted'))
        lines.append('| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |'.format(
            r['case'], 'yes' if r['ok'] else 'NO', r.get('exit_code', '-'),
            r.get('iteration', '-'), r.get('max_abs_difference', '-'), uninterrupted,
            _s(r.get('seconds_to_first_step')) or '-', ', '.join(map(str, left)) or 'nothing',
            '-' if nodes is None else ', '.join('{}: {}'.format(h, len(d) or 'none')
                                                for h, d in sorted(nodes.items())),
            len(r['tmp_left'])))
    s = data['summary']
    if s:
        lines += ['', 'Over {} losses of a killed node: median {:.2f} s, max {:.2f} s from the '
                  'loss to the first step on the survivors; parts (medians): {}.'.format(
                      s['losses'], s['median_s'], s['max_s'], ', '.join(
                          f'{k} {v:.2f} s' for k, v in s['parts_median_s'].items()
                          if v is not None))]
        if s.get('today_median_s') is not None:
            lines.append('The same loss today (the job ends, the same command again on 2 '
                         'nodes, resumed from disk; no queue wait counted): median {:.2f} s '
                         '({:.2f} s to the end of the job, {:.2f} s from the new start to '
                         'its first step).'.format(
                             s['today_median_s'], s['today_parts_median_s']['job_end'],
                             s['today_parts_median_s']['restart_to_first_step']))
    return '\n'.join(lines) + '\n'


if __name__ == '__main__':
    sys.exit(main())
