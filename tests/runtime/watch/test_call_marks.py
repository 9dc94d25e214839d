"""The watchdog's marks of communication calls (runtime.watch.call_marks and .watchdog): the
call a rank is in and how many it made, on its row of the progress board, for the calls of
the ChainerMN API and of the communicator's mpi4py handle alike; nested calls count once; a
thread's calls go to the thread's columns. One process on MPI_COMM_SELF; the whole path on
real ranks is the fault matrix's (tests/scripts/test_fault_matrix.py)."""
import os
import threading

import pytest
from mpi4py import MPI

import chainermn.communicators
from chainermn_torus.runtime.watch import call_marks, progress_board as pb, watchdog
from chainermn_torus.watchers import board_layout


@pytest.fixture(scope='module')
def dog():  # one for the module: its watcher process takes a second to start
    d = watchdog.Watchdog(30, comm=MPI.COMM_SELF)
    try:
        yield d
    finally:
        d.stop()


def _row(d):
    return d._board.row(d._slot).copy()


def test_a_call_is_marked_once_however_deep_and_left(dog):
    comm = chainermn.communicators.create_communicator('naive', mpi_comm=MPI.COMM_SELF)
    comm = dog.mark_calls(comm)
    assert isinstance(comm.mpi_comm, MPI.Intracomm) and comm.mpi_comm == MPI.COMM_SELF
    dog.step_started()
    assert comm.allreduce_obj(3) == 3  # ChainerMN's call, which calls mpi_comm.allreduce
    row = _row(dog)
    assert (row[board_layout.CALLS_MADE], row[board_layout.INSIDE]) == (1, 0)
    assert pb.call_name(row[board_layout.CALL]) == 'allreduce_obj'
    assert comm.mpi_comm.bcast('x') == 'x'  # a script's direct call on the handle
    row = _row(dog)
    assert row[board_layout.CALLS_MADE] == 2 and pb.call_name(row[board_layout.CALL]) == 'MPI bcast'
    dog.beat()  # a phase mark counts the calls afresh
    row = _row(dog)
    assert row[board_layout.CALLS_MADE] == 0 and row[board_layout.PHASE] == board_layout.BETWEEN


def test_inside_a_call_and_a_threads_calls_have_their_own_columns(dog):
    comm = dog.mark_calls(
        chainermn.communicators.create_communicator('naive', mpi_comm=MPI.COMM_SELF))
    dog.step_started()
    dog.enter('multi_node_mean_grad')
    inside = _row(dog)
    dog.enter('MPI allreduce')  # a call inside the call: not another one
    nested = _row(dog)
    dog.leave()
    dog.leave()
    assert (inside[board_layout.INSIDE], inside[board_layout.CALLS_MADE]) == (1, 1)
    assert pb.call_name(inside[board_layout.CALL]) == 'multi_node_mean_grad'
    assert (nested[board_layout.CALLS_MADE], nested[board_layout.CALL]) == \
        (1, inside[board_layout.CALL])
    assert _row(dog)[board_layout.INSIDE] == 0
    seen = {}

    def background():
        comm.bcast_obj(1)
        seen['thread'] = _row(dog)
    t = threading.Thread(target=background)
    t.start()
    t.join()
    row = seen['thread']
    assert (row[board_layout.BG_CALLS], row[board_layout.BG_INSIDE]) == (1, 0)
    assert pb.call_name(row[board_layout.BG_CALL]) == 'bcast_obj'
    assert row[board_layout.CALLS_MADE] == 1  # the main thread's count is its own


def test_a_dup_of_a_marked_handle_works_unmarked_and_marking_twice_is_once(dog):
    comm = dog.mark_calls(
        chainermn.communicators.create_communicator('naive', mpi_comm=MPI.COMM_SELF))
    handle = comm.mpi_comm
    assert dog.mark_calls(comm) is comm and comm.mpi_comm is handle
    dup = comm.mpi_comm.Dup()
    try:
        before = _row(dog)[board_layout.CALLS_MADE]
        assert dup.allreduce(2) == 2
        assert _row(dog)[board_layout.CALLS_MADE] == before
    finally:
        dup.Free()


def test_every_marked_name_has_its_code_on_the_board():
    names = set(call_marks.API) | set(call_marks.MPI_METHODS.values())
    assert all(pb.call_code(n) for n in names)
    assert pb.call_name(0) == 'a communication call'


@pytest.mark.slow  # full tier only: the fast tier keeps one of its kind
def test_the_board_keeps_the_directory_a_rank_writes_a_checkpoint_to(dog, tmp_path):
    from chainermn_torus.runtime.files import held
    with held.walk(str(tmp_path), 'the checkpoint directory') as place:
        dog.checkpoint(place)
    st = tmp_path.stat()
    record = f'{st.st_dev}:{st.st_ino}:{tmp_path}'
    assert dog._board.writing_to(dog._slot) == record
    # What a rank's own watcher reads, without the package, when the watchdog process is
    # gone: the writer's pid and directory, with the identity it held (it removes the
    # temporaries of the ranks it ends, and only where the path still names that directory).
    assert board_layout.writing(dog._board.path) == [(os.getpid(), record)]
    dog.between()
    assert dog._board.writing_to(dog._slot) == ''
    assert board_layout.writing(dog._board.path) == []


def test_the_marks_are_a_wrapper_and_the_communicator_is_left_as_it_was(dog):
    from chainermn_torus.communicators import capabilities
    from chainermn_torus.runtime.chainer_glue import patches
    comm = call_marks.unmarked(
        chainermn.communicators.create_communicator('naive', mpi_comm=MPI.COMM_SELF))
    original = comm.mpi_comm
    marked = dog.mark_calls(comm)
    # The communicator itself: no patch, its own class, methods and handle.
    assert not patches.applied(owner=comm) and 'multi_node_mean_grad' not in vars(comm)
    assert comm.mpi_comm is original and type(comm.mpi_comm) is MPI.Intracomm
    # The wrapper: a class of its own per communicator class, the inner's attributes
    # through it (written too), its capabilities as declared, no engine.
    assert type(marked).__name__ == 'MarkedNaiveCommunicator' and marked is not comm
    assert isinstance(marked, call_marks.MarkedCommunicator) and marked.engine is None
    assert marked.rank == comm.rank and marked.mpi_comm is not original
    assert capabilities.of(marked) is capabilities.of(comm) is capabilities.FOREIGN
    marked.my_note = 3
    assert comm.my_note == 3
    assert call_marks.unmarked(marked) is comm and call_marks.unmarked(comm) is comm
    from chainermn_torus.communicators.pure_allreduce import PureAllreduceCommunicator
    ours = PureAllreduceCommunicator(MPI.COMM_SELF)
    assert capabilities.of(dog.mark_calls(ours)) is capabilities.OURS
    ours.finalize()


def test_a_timed_method_is_an_instance_patch_undone_by_untime():
    from chainermn_torus.extensions import timing
    from chainermn_torus.runtime.chainer_glue import patches

    class Work:
        def update(self):
            return 1
    w = Work()
    stats = timing.time_calls(w, 'update', {'s': 0.0, 'n': 0}, 's', 'n')
    assert w.update() == 1 and stats['n'] == 1
    (p,), = [patches.applied('timing', owner=w)]
    assert p.name == 'update' and 'update' in vars(w)
    assert timing.untime(w) == 1 and 'update' not in vars(w) and w.update() == 1
    assert stats['n'] == 1
