"""A real training job for the fault matrix (scripts/fault_matrix.py,
tests/scripts/test_fault_matrix.py).

    fault_job.py FAULT COMMUNICATOR LOADER CHECKPOINT_DIR

Fashion-MNIST, an MLP, the multi-node optimizer, Chainer's Trainer with our checkpointer
every 2 iterations, and as training iterator our LoaderIterator ('ours', 2 loader
processes) or a SerialIterator ('serial'). COMMUNICATOR is a variant of the table
(algorithms.variants) or a factory name. At step FAULT_STEP (5) the fault happens:

  raise          rank 1 raises (the abort hook ends the job)
  kill           rank 1 is killed (SIGKILL)
  loader-death   rank 1 kills one of its loader processes (SIGKILL)
  hang           rank 1 stops (sleeps): only the watchdog ends the job
  signal         rank 0 prints FAULT and training goes on: the harness signals mpiexec
  enospc         rank 0's write of checkpoint 4 fails halfway with ENOSPC (checkpoint_fault.py)
  shm-full       (a /dev/shm too small) whatever allocates shared memory first fails
  mean-overflow  float16 communication with check_finite; from step 5 on every rank's
                 gradient of one weight is 0.9 x 65504 x P: each share fits in float16, the
                 mean does not (the check after averaging stops the job)
  diverge        after step 5 a weight is NaN on every rank: the checkpoint at step 6 refuses
  shm-short      after step 1, before the first averaging allocates the node-shared buffers,
                 rank 0 fills /dev/shm until 8 KB more than their bytes are free: what the
                 room check used to pass and then died of SIGBUS
  eval-stall     an evaluation after step 4 (40 batches): rank 1 stops at its batch 3
  eval-long      the same evaluation, healthy, each batch EVAL_BATCH_S (default 0.3 s) on
                 every rank: 40 batches, longer than 10 x the watchdog's limit (the matrix:
                 0.3 s and 1 s), so only a watchdog that counts batches lets it finish;
                 then trains to step 6 and reports OK
  frozen         trains until stopped from outside (every process of a node stopped: the
                 emulated cluster's frozen-node rows); rank 0 prints FAULT at step 5, when
                 the harness stops the node
  frozen-eval    the same with eval-long's evaluation after step 4; rank 0 prints
                 EVALUATION at its first batch, when the harness stops the node
  stop-startup   rank 1 stops itself (SIGSTOP) after its communicator is made, before the
                 data is scattered: the watchdog's start-up
  stop-checkpoint  rank 1 stops itself halfway through writing its file of checkpoint 6
  stop-final-eval  training ends at step 6; in the evaluation after it (the script's final
                 one, after watchdog.training_over()) rank 1 stops itself at batch 3
  spin           rank 1 spins in its forward of step 5 (computing, never reaching the
                 all-reduce)
  enospc-manifest  rank 0's write of checkpoint 4's manifest fails with ENOSPC halfway
  sys-exit       rank 1 calls sys.exit(3)
  loader-stop    rank 1 stops one of its loader processes (SIGSTOP)
  sigterm-ckpt   rank 0 waits between checkpoint 4's manifest and latest.json (FAULT: the
                 harness sends SIGTERM to mpiexec then)
  attack         rank 0 prints FAULT at step 5 (the harness attacks the job as another user
                 then) and training goes on to FAULT_STEPS (20) and reports OK
  none           nothing: trains FAULT_STEPS (20) steps and reports OK

FAULT_RESUME=1: the checkpointer resumes first (``maybe_resume``, as --auto-resume), and
rank 0 prints ``RESUMED <iteration or None>``.

Rank 0 prints ``FAULT <time.time()>`` just before the fault (for the time to the end), or
the rank that faults where only it can.  The harness stops ranks from outside for the
'frozen' rows (every process of a node) and, at ``FAULT``, for its rank-stop rows.
"""
import os
import signal
import sys
import time

import chainermn_torus  # noqa: F401 first: then Chainer's import scans no packages

import chainer
import numpy
from chainer import training

import chainermn
from chainermn_torus.algorithms import variants
from chainermn_torus.runtime.watch import watchdog
from chainermn_torus.datasets.mnist import load_mnist_idx
from chainermn_torus.extensions.checkpoint import MultiNodeCheckpointer, writing
from chainermn_torus.models import MLP

import checkpoint_fault  # beside this file

FAULT, COMMUNICATOR, LOADER, CKPT = sys.argv[1:5]
FAULT_STEP = 5
UNITS = int(os.environ.get('FAULT_UNITS', '100'))
BATCH = int(os.environ.get('FAULT_BATCH', '50'))
STEP_SLEEP = float(os.environ.get('FAULT_STEP_SLEEP', '0'))
EVAL_BATCH_S = float(os.environ.get('EVAL_BATCH_S', '0.3'))
STEPS = int(os.environ.get('FAULT_STEPS', '20'))
DOUBLE_BUFFERING = os.environ.get('FAULT_DOUBLE_BUFFERING') == '1'
# mean-overflow: the step after which gradients overflow (default: step 5's gradients). With
# double buffering and 5, step 6's overflowed means are still unapplied when checkpoint 6 is
# written.
BOOST_AFTER = int(os.environ.get('FAULT_BOOST_AFTER', '4'))
STEP = [0]  # training steps finished (the Fault extension counts them)


def fault_now():
    print(f'FAULT {time.time()!r}', flush=True)


def stop_self():
    """Stopped as a debugger or a signal would (process state T), not asleep."""
    os.kill(os.getpid(), signal.SIGSTOP)


def inject_checkpoint_faults(rank):
    """The checkpoint faults, injected here (test code) around the package's atomic writes."""
    if FAULT == 'enospc':
        checkpoint_fault.install('full:4')
    write = writing.atomic_write

    def faulty(place, name, writer, *args, **kwargs):
        if FAULT == 'enospc-manifest' and rank == 0 and name == 'manifest_iter_4.json':
            def full(f):
                f.write(b'{"iteration": 4, ')  # half a manifest, as a full disk leaves
                fault_now()
                raise OSError(28, 'No space left on device')
            return write(place, name, full, *args, **kwargs)
        if FAULT == 'sigterm-ckpt' and rank == 0 and name == 'latest.json' and \
                os.path.exists(os.path.join(CKPT, 'manifest_iter_4.json')) and \
                not os.path.exists(os.path.join(CKPT, 'manifest_iter_6.json')):
            fault_now()  # checkpoint 4 is complete; latest.json still names 2
            time.sleep(60)
        if FAULT == 'stop-checkpoint' and rank == 1 and name.startswith('snapshot_iter_6.'):
            def stopped(f):
                f.write(b'\0' * 4096)
                fault_now()
                stop_self()
                writer(f)
            return write(place, name, stopped, *args, **kwargs)
        return write(place, name, writer, *args, **kwargs)
    writing.atomic_write = faulty


BALLAST = []   # shm-short: the descriptor that holds /dev/shm's space
BOOST = [0.0]  # added to one weight's gradient from step 5 on (mean-overflow)


def make_communicator():
    extra = {'allreduce_grad_dtype': numpy.float16} if FAULT == 'mean-overflow' else {}
    if COMMUNICATOR in variants.VARIANTS:
        v = variants.VARIANTS[COMMUNICATOR]
        return chainermn.create_communicator(v.communicator, **dict(v.options, **extra))
    return chainermn.create_communicator(COMMUNICATOR, **extra)


class Boosted(chainer.links.Classifier):
    def forward(self, x, t):
        if FAULT == 'spin' and STEP[0] == FAULT_STEP - 1 and self.rank == 1:
            fault_now()
            while True:  # computing, holding the GIL, never reaching the all-reduce
                pass
        loss = super().forward(x, t)
        if BOOST[0]:
            loss = loss + BOOST[0] * self.predictor.l1.W[0, 0]
        return loss


def _fill_shm(model, comm):
    """Leave the node-shared row buffers' bytes (whole pages, each rank of the node) + 8 KB
    free in /dev/shm: the old check's need, which was a few KB short of the kernel's."""
    page = os.sysconf('SC_PAGE_SIZE')
    nbytes = sum(p.array.nbytes for _, p in model.namedparams())
    raw = comm.intra_size * (-(-nbytes // page) * page)
    st = os.statvfs('/dev/shm')
    ballast = st.f_bavail * st.f_frsize - (raw + 8192)
    fd = os.open('/dev/shm/fault-ballast', os.O_CREAT | os.O_RDWR)
    os.posix_fallocate(fd, 0, ballast)
    os.unlink('/dev/shm/fault-ballast')  # the open descriptor keeps the space taken
    BALLAST.append(fd)


class Fault(chainer.training.Extension):
    trigger = (1, 'iteration')
    priority = chainer.training.PRIORITY_WRITER + 1  # runs before the checkpointer

    def __init__(self, comm, train_iter):
        self.comm, self.iter = comm, train_iter

    def __call__(self, trainer):
        step = STEP[0] = trainer.updater.iteration
        rank = self.comm.rank
        time.sleep(STEP_SLEEP)  # steps as long as a real model's (timeline rows)
        if FAULT == 'enospc' and step == 4 and rank == 0:  # its checkpoint write fails next
            print(f'FAULT {time.time()!r}', flush=True)
        if FAULT == 'mean-overflow' and step == BOOST_AFTER:
            BOOST[0] = 0.9 * 65504 * self.comm.size
            if rank == 0:
                print(f'FAULT {time.time()!r}', flush=True)
        if FAULT == 'shm-short' and step == 1:
            if rank == 0:
                print(f'FAULT {time.time()!r}', flush=True)
                _fill_shm(trainer.updater.get_optimizer('main').target, self.comm)
            self.comm.mpi_comm.Barrier()
        if FAULT == 'diverge' and step == FAULT_STEP:
            trainer.updater.get_optimizer('main').target.predictor.l1.W.array[0, 0] = \
                numpy.nan
            if rank == 0:
                print(f'FAULT {time.time()!r}', flush=True)
        if step != FAULT_STEP:
            return
        if FAULT in ('signal', 'frozen', 'stop-step', 'attack') and rank == 0:
            print(f'FAULT {time.time()!r}', flush=True)
            return
        if rank != 1 or FAULT not in ('raise', 'kill', 'loader-death', 'hang', 'sys-exit',
                                      'loader-stop'):
            return
        print(f'FAULT {time.time()!r}', flush=True)
        if FAULT == 'raise':
            raise RuntimeError(f'injected fault on rank 1 at step {step}')
        if FAULT == 'kill':
            os.kill(os.getpid(), signal.SIGKILL)
        if FAULT == 'loader-death':
            os.kill(self.iter.processes[0].pid, signal.SIGKILL)
        if FAULT == 'hang':
            time.sleep(3600)
        if FAULT == 'sys-exit':
            sys.exit(3)
        if FAULT == 'loader-stop':
            os.kill(self.iter.processes[0].pid, signal.SIGSTOP)


def slow_converter(comm):
    """The evaluation's converter: EVAL_BATCH_S a batch; eval-stall stops rank 1 at its
    third batch (prints FAULT first)."""
    batches = [0]

    def convert(batch, device=None):
        batches[0] += 1
        if batches[0] == 1 and comm.rank == 0:
            print(f'EVALUATION {time.time()!r}', flush=True)
        if FAULT == 'eval-stall' and comm.rank == 1 and batches[0] == 3:
            print(f'FAULT {time.time()!r}', flush=True)
            time.sleep(3600)
        if FAULT == 'stop-final-eval' and FINAL[0] and comm.rank == 1 and batches[0] == 3:
            fault_now()
            stop_self()
        time.sleep(EVAL_BATCH_S)
        return chainer.dataset.concat_examples(batch, device)
    return convert


FINAL = [False]  # the evaluation after training has begun


def main():
    comm = make_communicator()
    inject_checkpoint_faults(comm.rank)
    if FAULT == 'stop-startup' and comm.rank == 1:
        fault_now()
        stop_self()
    # Rank 0 reads what the job uses (2,000 training examples, 40 per rank to evaluate), as
    # the example does: a row's time is mostly its processes' start.
    train, test = load_mnist_idx(limit=2000) if comm.rank == 0 else (None, None)
    train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=0)
    model = Boosted(MLP(UNITS, 10))
    model.rank = comm.rank
    opt = chainermn.create_multi_node_optimizer(
        chainer.optimizers.Adam(), comm, check_finite=FAULT == 'mean-overflow',
        double_buffering=DOUBLE_BUFFERING).setup(model)
    if LOADER == 'ours':
        from chainermn_torus.loader import LoaderIterator
        it = LoaderIterator(train, BATCH, n_processes=2, seed=comm.rank)
    else:
        it = chainer.iterators.SerialIterator(train, BATCH)
    updater = training.StandardUpdater(it, opt, device=-1)
    steps = {'none': STEPS, 'attack': STEPS, 'eval-long': 6,
             'stop-final-eval': 6}.get(FAULT, 10 ** 6)
    trainer = training.Trainer(updater, (steps, 'iteration'), out=CKPT)
    evaluator = None
    if FAULT in ('eval-stall', 'eval-long', 'frozen-eval', 'stop-final-eval'):
        test = chainermn.scatter_dataset(test[:40 * comm.size] if comm.rank == 0 else None,
                                         comm)
        evaluator = chainermn.create_multi_node_evaluator(
            chainer.training.extensions.Evaluator(
                chainer.iterators.SerialIterator(test, 1, repeat=False, shuffle=False),
                model, converter=slow_converter(comm)), comm)
        if FAULT != 'stop-final-eval':
            trainer.extend(evaluator, trigger=(4, 'iteration'), name='evaluation')
    # Trusted as the job's settings say (CHAINERMN_TORUS_TRUST_CHECKPOINTS), handed down
    # from what the communicator's init resolved.
    checkpointer = MultiNodeCheckpointer(
        comm, CKPT, trust=chainermn_torus.process_setup.setup().settings['trust_checkpoints'])
    trainer.extend(checkpointer, trigger=(2, 'iteration'))
    if os.environ.get('FAULT_RESUME') == '1':
        resumed = checkpointer.maybe_resume(trainer)
        if comm.rank == 0:
            print(f'RESUMED {resumed}', flush=True)
    trainer.extend(Fault(comm, it))
    trainer.run()
    if FAULT == 'stop-final-eval':  # as the examples end: training over, a last evaluation
        dog = watchdog.active()
        if dog is not None:
            if hasattr(dog, 'training_over'):
                dog.training_over()
            else:  # an older package (fault_matrix.py --code): the examples stopped it
                dog.stop()
        FINAL[0] = True
        evaluator()
    if LOADER == 'ours':
        it.finalize()
    print(f'OK rank {comm.rank}', flush=True)


if __name__ == '__main__':
    chainermn_torus  # noqa: F401 registers our names
    main()
