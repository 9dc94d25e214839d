"""The watchdog's verdicts (runtime.watch.verdict.judge: a pure function of the rows and the
process states) as cases, who watches whom and the channel between watchers
(runtime.watch.heartbeat), the phase table, and the node watcher's own lines; the whole path
on real ranks is in test_faults.py, test_fault_matrix.py and the emulated cluster's
frozen-node rows."""
import collections
import os

import pytest

from chainermn_torus.runtime.files import devshm, shared_paths
from chainermn_torus.runtime.watch import heartbeat as hb
from chainermn_torus.watchers import board_layout
from chainermn_torus.watchers.board_layout import (AFTER, BETWEEN, CHECKPOINT, EVALUATION,
                                                   FINAL_EVALUATION, FINISHED, STARTUP, STEP)
from chainermn_torus.runtime.watch import node_watch as nw, progress_board as pb, verdict
from conftest import line_with
from tests.other_user import as_other

S = 1e9  # ns
KEY = bytes(range(32))


LIMITS = board_layout.Limits(limit_s=3.0, startup_s=900.0, outside=10)


def row(rank, finished, phase, age, count=0, state='S', call=None, call_age=None, calls=0,
        held=0.0, bg_call=None):
    """A rank as a heartbeat carries it; ``call``: the name of the call it is in."""
    pos = [-1, 0, 0] if phase == STARTUP else [finished, board_layout.PHASE_OF[phase].order, count]
    return list(verdict.Seen(rank, pos, phase, age, state, int(call is not None),
                        pb.call_code(call) if call else 0,
                        age if call_age is None else call_age, calls,
                        int(bg_call is not None), pb.call_code(bg_call) if bg_call else 0,
                        held))


MEAN = 'multi_node_mean_grad'


def peer(host, rows, heard_s_ago=0.5, gone=False, now=100 * S):
    return {'host': host, 'heard': now - heard_s_ago * S, 'rows': rows, 'gone': gone}


def judge(local, peers=None, host='node0'):
    return verdict.judge(LIMITS, host, local, peers or {}, 100 * S, 2.0)


def test_nothing_is_said_while_every_rank_moves():
    local = [row(0, 7, STEP, 0.2), row(1, 7, BETWEEN, 25.0)]  # within both limits
    assert judge(local) is None


def test_the_rank_in_no_call_on_another_node_is_named_with_its_host_and_the_waiters():
    local = [row(0, 7, STEP, 4.0, call=MEAN), row(1, 7, STEP, 4.0, call=MEAN)]
    peers = {1: peer('node1', [row(2, 7, STEP, 4.0, call=MEAN),
                               row(3, 6, BETWEEN, 4.2, state='R')])}
    text = judge(local, peers)
    assert text.startswith('chainermn_torus watchdog: the job waits for rank 3 on node1, '
                           'computing outside communication'), text
    assert 'between steps 6 and 7' in text, text
    assert 'ranks 0-2 (node0, node1) wait in multi_node_mean_grad (4 s) for it' in text, text
    assert 'noticed on node0: rank 0 waited in multi_node_mean_grad for 4 s' in text, text
    assert text.count('\n') == 0


def test_a_stopped_rank_is_named_inside_the_same_call_as_the_others():
    # SIGSTOP in the middle of the all-reduce: by positions and calls every rank is at the
    # same point; the process state tells which one holds the others up.
    local = [row(0, 13, STEP, 3.5, call=MEAN, calls=1),
             row(1, 13, STEP, 3.5, call=MEAN, calls=1, state='T', held=3.2)]
    text = judge(local)
    assert 'the job waits for rank 1 on node0, stopped (process state T' in text, text
    assert 'for 3 s, inside multi_node_mean_grad, in training step 14' in text, text
    assert 'rank 0 (node0) waits in multi_node_mean_grad' in text, text


def test_a_stopped_rank_is_a_stall_after_the_step_limit_in_any_phase():
    # In a checkpoint (10 x the limit) and at start-up (900 s): stopped for 3.5 s is enough.
    for phase, finished in ((CHECKPOINT, 6), (STARTUP, 0)):
        local = [row(0, finished, phase, 3.6, call='MPI allreduce'),
                 row(1, finished, phase, 3.6, state='T', held=3.5)]
        text = judge(local)
        assert 'rank 1 on node0, stopped' in text, (phase, text)
        assert 'a stopped or vanished process is a stall after the step limit' in text, text
        local[1] = row(1, finished, phase, 3.6, state='T', held=2.0)  # not yet
        assert judge(local) is None, phase


def test_start_up_has_its_own_limit_and_names_the_rank_that_never_arrives():
    local = [row(0, 0, STARTUP, 899.0, call='bcast_obj'), row(1, 0, STARTUP, 899.0)]
    assert judge(local) is None
    local = [row(0, 0, STARTUP, 901.0, call='bcast_obj'),
             row(1, 0, STARTUP, 901.0, state='S', call_age=895.0)]
    text = judge(local)
    assert 'rank 1 on node0, outside communication, blocked (sleeping' in text, text
    assert 'at start-up (before its first training step)' in text, text
    assert 'start-up limit 900 s, set by CHAINERMN_TORUS_WATCHDOG_STARTUP' in text, text
    first = [row(0, 0, STEP, 10.0, call=MEAN), row(1, 0, STEP, 10.0, state='R')]
    assert judge(first) is None  # the first step (compiling) is start-up's


def test_a_silent_node_is_named_before_any_rank():
    local = [row(0, 7, STEP, 3.5)]
    peers = {1: peer('node1', [row(2, 7, STEP, 0.1), row(3, 7, STEP, 0.1)],
                     heard_s_ago=3.4),
             2: peer('node2', [row(4, 6, BETWEEN, 3.0)], gone=True, heard_s_ago=9)}
    text = judge(local, peers)
    assert line_with(text, 'node node1', '(ranks 2, 3)', 'silent for 3 s'), text
    assert 'node2' not in text  # it said goodbye: finished, not lost


def test_an_evaluation_batch_has_the_step_limit_and_the_rank_outside_is_named():
    local = [row(0, 4, EVALUATION, 3.5, count=40, call='allreduce_obj'),
             row(1, 4, EVALUATION, 3.6, count=3)]
    text = judge(local)
    assert 'the job waits for rank 1 on node0, outside communication, blocked' in text, text
    assert 'in the evaluation after step 4 (batch 3)' in text, text
    assert '(limit 3 s per step or evaluation batch' in text, text


def test_every_rank_in_the_same_call_is_a_deadlock_not_a_rank():
    local = [row(0, 9, STEP, 5.0, call=MEAN, calls=1),
             row(1, 9, STEP, 5.0, call=MEAN, calls=1)]
    peers = {1: peer('node1', [row(2, 9, STEP, 5.0, call=MEAN, calls=1)])}
    text = judge(local, peers)
    assert line_with(text, 'waits for none', 'multi_node_mean_grad', 'step 10', 'deadlock'), \
        text


def test_a_rank_in_an_earlier_call_than_the_others_is_named():
    local = [row(0, 9, STEP, 5.0, call=MEAN, calls=2),
             row(1, 9, STEP, 5.0, call='MPI bcast', calls=1)]
    text = judge(local)
    assert 'the job waits for rank 1 on node0, waiting in MPI bcast' in text, text


def test_a_rank_past_its_limit_while_the_others_still_work_is_named():
    # Rank 1 asleep at batch 3 of an evaluation; rank 0 still evaluating its own batches
    # (no one waits in a call yet): the rank past its limit is the one.
    local = [row(0, 4, EVALUATION, 0.2, count=14, state='R'),
             row(1, 4, EVALUATION, 3.5, count=3)]
    text = judge(local)
    assert 'the job waits for rank 1 on node0, outside communication, blocked' in text, text
    assert 'in the evaluation after step 4 (batch 3)' in text, text


def test_the_evaluation_after_training_is_named_as_such():
    local = [row(0, 50, FINAL_EVALUATION, 3.5, count=40, call='allreduce_obj'),
             row(1, 50, FINAL_EVALUATION, 3.6, count=3, state='T', held=3.4)]
    text = judge(local)
    assert 'rank 1 on node0, stopped' in text and 'in the evaluation after training ' \
        '(batch 3)' in text, text


def test_every_rank_computing_is_no_rank_to_blame():
    local = [row(0, 9, STEP, 5.0, state='R'), row(1, 9, STEP, 5.0, state='R')]
    text = judge(local)
    assert 'the job waits for none: no rank waits for another' in text, text


def test_after_training_only_a_wait_in_a_call_is_a_stall():
    # Rank 0 writes its results for a long time, the others have finished: no stall.
    local = [row(0, 50, AFTER, 400.0, state='R'), row(1, 50, FINISHED, 400.0)]
    assert judge(local) is None
    local = [row(0, 50, AFTER, 40.0, call='allreduce_obj', call_age=31.0),
             row(1, 50, AFTER, 40.0, state='R', call_age=35.0)]
    text = judge(local)
    assert 'rank 1 on node0, computing outside communication' in text, text
    assert 'after training' in text and '10 x CHAINERMN_TORUS_WATCHDOG' in text, text


def test_every_rank_stopped_is_a_suspension_not_a_stall():
    local = [row(0, 9, STEP, 50.0, state='T', held=50.0),
             row(1, 9, STEP, 50.0, state='T', held=50.0)]
    assert judge(local) is None


def test_the_communication_thread_is_said_when_the_main_thread_is_outside():
    local = [row(0, 9, STEP, 5.0, call='the wait for the communication thread'),
             row(1, 9, STEP, 5.0, state='R', bg_call=MEAN)]
    text = judge(local)
    assert line_with(text, 'rank 1 on node0', 'computing outside communication',
                     'communication thread in multi_node_mean_grad'), text


# The verdict as a table: (case, this node's rows, the other nodes', the words it must say;
# None: no verdict). One case per branch of verdict.judge, in its order.
CASES = [
    ('every rank moves', [row(0, 7, STEP, 0.2), row(1, 7, BETWEEN, 25.0)], {}, None),
    ('a node fell silent', [row(0, 7, STEP, 4.0, call=MEAN)],
     {1: peer('node1', [row(1, 7, STEP, 4.0)], heard_s_ago=9)},
     ('node node1 (ranks 1) silent for 9 s',)),
    ('a stopped rank', [row(0, 3, STEP, 3.5, call=MEAN), row(1, 3, STEP, 3.5, state='T',
                                                                held=3.4)], {},
     ('rank 1 on node0, stopped (process state T', 'rank 0 (node0) waits in')),
    ('a gone rank', [row(0, 3, STEP, 3.5, call=MEAN), row(1, 3, STEP, 3.5, state='X',
                                                             held=3.4)], {},
     ('rank 1 on node0, gone (its process no longer exists',)),
    ('the rank outside every call', [row(0, 5, STEP, 4.0, call=MEAN),
                                     row(1, 4, BETWEEN, 4.0, state='D')], {},
     ('rank 1 on node0, outside communication, in uninterruptible I/O',
      'between steps 4 and 5')),
    ('a rank in an earlier call', [row(0, 5, STEP, 4.0, call=MEAN, calls=3),
                                   row(1, 5, STEP, 4.0, call='MPI bcast', calls=2)], {},
     ('rank 1 on node0, waiting in MPI bcast',)),
    ('every rank in the same call', [row(0, 5, STEP, 4.0, call=MEAN, calls=2),
                                     row(1, 5, STEP, 4.0, call=MEAN, calls=2)], {},
     ('none: every rank waits in multi_node_mean_grad', 'a deadlock')),
    ('every rank computing', [row(0, 5, STEP, 4.0, state='R'),
                              row(1, 5, STEP, 4.0, state='R')], {},
     ('none: no rank waits for another',)),
    ('every rank stopped: suspended', [row(0, 5, STEP, 4.0, state='T', held=4.0),
                                       row(1, 5, STEP, 4.0, state='T', held=4.0)], {}, None),
    ('start-up within its limit', [row(0, 0, STARTUP, 60.0)], {}, None),
    ('after training, outside any call', [row(0, 9, AFTER, 40.0)], {}, None),
]


@pytest.mark.parametrize('case, local, peers, words', CASES, ids=[c[0] for c in CASES])
def test_the_verdict_of_each_case(case, local, peers, words):
    text = judge(local, peers)
    if words is None:
        assert text is None, text
        return
    assert text.startswith('chainermn_torus watchdog: the job waits for ') and '\n' not in text
    for w in words:
        assert w in text, (case, w, text)


def test_every_node_is_watched_and_heartbeats_go_to_its_watchers():
    for n in (1, 2, 3, 32, 33, 200):
        watched_by = collections.Counter()
        for me in range(n):
            for other in hb.monitored(me, n):
                watched_by[other] += 1
                assert me in hb.watchers_of(other, n)  # other's heartbeats reach me
        expected = n - 1 if n <= hb.MAX_ALL else hb.RING
        assert all(watched_by[i] == expected for i in range(n)), (n, watched_by)


def test_a_node_never_heard_from_is_not_taken_for_a_frozen_one():
    # UDP blocked between nodes: no heartbeat ever arrived from node1. That is no verdict
    # (its ranks are still watched through the ranks that wait for them).
    local = [row(0, 7, BETWEEN, 0.5)]
    never = dict(peer('node1', [], heard_s_ago=60), seen=False)
    assert judge(local, {1: never}) is None
    heard = dict(never, seen=True)
    assert 'node node1' in judge(local, {1: heard})


def test_the_first_node_says_once_which_watchers_it_never_heard(capsys):
    board = pb.Board.create(1, 3.0, 10)
    try:
        beats = hb.Heartbeat([('127.0.0.1', 8)])
        table = [{'host': 'node0', 'addrs': beats.addresses()},
                 {'host': 'node1', 'addrs': [['127.0.0.1', 8, 9]]}]
        beats.join(table, 0, pb.now_ns(), KEY)
        w = nw.Watcher(board, leader_pid=0, heartbeat=beats)
        w.unheard(w.started + 1 * S)  # within the grace: nothing yet
        assert capsys.readouterr().err == ''
        w.unheard(w.started + 10 * S)
        w.unheard(w.started + 20 * S)  # once
        err = capsys.readouterr().err
        assert err.count('\n') == 1 and 'no heartbeat from the watcher(s) of 1 node(s) ' \
            '(node1)' in err and 'UDP between nodes seems blocked' in err, err
        beats.close()
    finally:
        board.close(remove=True)


def test_a_board_name_taken_by_another_user_is_passed_over(monkeypatch):
    # Before: the board's name was cmtorus_<job>_<pid>_watch_<host>, which any user could
    # make first (the node's first rank's pid shows seconds before): "cannot start the
    # watchdog" ended the job. Now a token follows, and a taken name is passed over.
    tokens = iter(['0badc0ffee00', '0badc0ffee00', 'feedfacecafe'])
    monkeypatch.setattr(shared_paths, 'token', lambda: next(tokens))
    taken = os.path.join(devshm.SHM_DIR, pb.Board.name() + '0badc0ffee00')
    if os.getuid() == 0:
        as_other(lambda: os.close(os.open(taken, os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                                          0o644)))
    else:
        open(taken, 'w').close()
    try:
        board = pb.Board.create(3, 3.0, 10)
        assert board.path == os.path.join(devshm.SHM_DIR, pb.Board.name() + 'feedfacecafe')
        assert board.slots == 3 and board.limit_s == 3.0
        board.close(remove=True)
        assert not os.path.exists(board.path)
    finally:
        os.remove(taken)


# --- the heartbeats' channel: only the job's own messages count --------------------------------
def two_nodes():
    """Two joined heartbeats on loopback, as two nodes of one job."""
    a, b = hb.Heartbeat([('127.0.0.1', 8)]), hb.Heartbeat([('127.0.0.1', 8)])
    table = [{'host': 'node0', 'addrs': a.addresses()}, {'host': 'node1', 'addrs': b.addresses()}]
    a.join(table, 0, 0, KEY)
    b.join(table, 1, 0, KEY)
    return a, b


def wait_receive(beats):
    import select
    select.select(beats.socks, [], [], 2.0)
    return beats.receive(pb.now_ns())


def test_a_flood_is_read_a_bounded_number_at_a_time():
    # Before: the watcher drained its socket in an unbounded loop: a sender faster than the
    # node kept it from its own heartbeat.
    import socket
    a, b = two_nodes()
    try:
        port = a.socks[0].getsockname()[1]
        a.socks[0].setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)  # none lost
        forger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for _ in range(hb.DRAIN_PER_WAKE + 40):
            forger.sendto(b'{"kind": "verdict", "node": 1}', ('127.0.0.1', port))
        forger.close()
        assert wait_receive(a) is False and a.dropped == hb.DRAIN_PER_WAKE
        assert wait_receive(a) is False and a.dropped == hb.DRAIN_PER_WAKE + 40
    finally:
        a.close()
        b.close()


def test_a_verdict_of_the_job_ends_it_and_a_forged_one_is_refused_and_counted():
    import socket
    a, b = two_nodes()
    try:
        port = a.socks[0].getsockname()[1]
        forger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # Unauthenticated JSON, as the attack sent it; a MAC under another key; a copy of a
        # real message with its body changed.
        forger.sendto(b'{"kind": "verdict", "node": 1, "rows": []}', ('127.0.0.1', port))
        forger.sendto(hb.seal(b'x' * 32, {'kind': 'verdict', 'node': 1, 'seq': 1 << 62}),
                      ('127.0.0.1', port))
        real = hb.seal(KEY, {'kind': 'beat', 'node': 1, 'seq': 5, 'rows': []})
        forger.sendto(real[:hb.MAC_BYTES] + real[hb.MAC_BYTES:].replace(b'beat', b'verd'),
                      ('127.0.0.1', port))
        forger.close()
        assert wait_receive(a) is False
        assert a.dropped == 3 and 'no valid MAC' in a.first_drop[1], a.first_drop
        assert not a.peers[1]['seen']  # nothing of it was taken as node1's
        b.send('beat', [[1, 2]])
        assert wait_receive(a) is False and a.peers[1]['rows'] == [[1, 2]]
        b.send('verdict')
        assert wait_receive(a) is True
        assert a.dropped == 3
    finally:
        a.close()
        b.close()


def test_a_replayed_or_repeated_message_is_ignored_and_a_node_outside_the_table_refused():
    a, b = two_nodes()
    try:
        port = a.socks[0].getsockname()[1]
        b.send('beat', [[7]])
        assert wait_receive(a) is False and a.peers[1]['rows'] == [[7]]
        sender = b.socks[0]
        # The job's key, but not its node (a node index outside the table, or this one).
        for node in (2, 0, -1):
            sender.sendto(hb.seal(KEY, {'kind': 'verdict', 'node': node, 'seq': 1 << 62}),
                          ('127.0.0.1', port))
        # A replay of an older message: ignored (copies to another address look the same).
        sender.sendto(hb.seal(KEY, {'kind': 'verdict', 'node': 1, 'seq': 3}), ('127.0.0.1', port))
        assert wait_receive(a) is False
        assert a.dropped == 3 and 'not another node of this job' in a.first_drop[1]
    finally:
        a.close()
        b.close()


def test_the_watcher_keeps_only_the_sockets_on_the_jobs_networks():
    one = [{'host': 'n0', 'addrs': [['10.1.2.3', 24, 5], ['127.0.0.1', 8, 6]]}]
    assert hb.job_addresses(one, 0) == [['127.0.0.1', 8, 6]]  # alone: loopback only
    two = one + [{'host': 'n1', 'addrs': [['192.168.7.9', 24, 7], ['10.1.2.4', 24, 8],
                                          ['127.0.0.1', 8, 9]]}]
    assert hb.job_addresses(two, 0) == [['10.1.2.3', 24, 5]]
    assert hb.job_addresses(two, 1) == [['10.1.2.4', 24, 8]]  # not its other network
    routed = [{'host': 'n0', 'addrs': [['10.1.2.3', 24, 5], ['127.0.0.1', 8, 6]]},
              {'host': 'n1', 'addrs': [['10.9.0.1', 24, 7], ['127.0.0.1', 8, 9]]}]
    assert hb.job_addresses(routed, 1) == [['10.9.0.1', 24, 7]]  # no shared subnet
    emulated = [{'host': 'n0', 'addrs': [['127.0.0.1', 8, 5]]},
                {'host': 'n1', 'addrs': [['127.0.0.1', 8, 6]]}]
    assert hb.job_addresses(emulated, 1) == [['127.0.0.1', 8, 6]]
    beats = hb.Heartbeat()  # a socket on each of this machine's addresses
    try:
        assert {s.getsockname()[0] for s in beats.socks} == {a for a, _ in hb.local_addresses()}
        table = [{'host': 'n0', 'addrs': beats.addresses()}]
        beats.join(table, 0, 0, KEY)  # a one-node job: nothing listens beyond loopback
        assert [s.getsockname()[0] for s in beats.socks] == ['127.0.0.1']
    finally:
        beats.close()


def test_the_phase_table_is_whole_and_every_reader_takes_it_from_there():
    # One row per phase: its words, its limit and its order (a new phase was five files).
    codes = [p.code for p in board_layout.PHASE_TABLE]
    assert sorted(codes) == list(range(len(codes))) and set(board_layout.PHASES) == set(codes)
    limits = board_layout.Limits(limit_s=3.0, startup_s=900.0, outside=10)
    for p in board_layout.PHASE_TABLE:
        assert board_layout.where(p.code, 4, 2) == p.where(4, 2)
        assert limits.limit(p.code) == limits.seconds(p.limit)
        board = [0] * board_layout.ROW
        board[board_layout.PHASE], board[board_layout.FINISHED_STEPS] = p.code, 4
        if p.code not in (STARTUP, FINISHED):
            assert pb.position(board)[1] == p.order
    assert limits.limit(STEP, first_step=True) == 900.0
    assert board_layout.where(STEP, 0, 0) == 'in its first training step (start-up)'
    # The calls: one list, every name marked has its code on the board.
    from chainermn_torus.runtime.watch import call_marks
    assert set(call_marks.API) | set(call_marks.MPI_METHODS.values()) <= set(board_layout.CALLS)
    assert all(pb.call_name(pb.call_code(c)) == c for c in board_layout.CALLS)


def test_a_rank_waiting_for_a_stopped_process_it_started_is_a_stall_after_the_limit():
    # A stopped loader process: the rank sleeps, waiting for its batch, and was named only
    # after 10 x the limit as "the job waits for none" (state L: the node watcher sees the
    # stopped child).
    local = [row(0, 7, STEP, 2.0, call=MEAN), row(1, 7, BETWEEN, 2.5, state='L',
                                                     held=3.5)]
    text = judge(local)
    assert text is not None and 'rank 1 on node0, waiting for a process it started (a loader ' \
        'process?), which is stopped (process state T' in text and 'for 4 s' in text, text
    assert judge([row(1, 7, BETWEEN, 2.5, state='L', held=2.0)]) is None  # within the limit


def test_a_verdict_names_where_its_limit_came_from_as_the_board_carries_it(tmp_path):
    # The step limit from the launcher's flag, start-up at its default: the header says
    # so (indices of board_layout's sources) and the verdict names them, not the variable.
    board = pb.Board.create(2, 3.0, 10, 900.0, sources=(1, 2))
    try:
        limits = board.limits()
    finally:
        board.close(remove=True)
    assert (limits.limit_from, limits.startup_from) == (
        '--watchdog', 'the default: the larger of 900 s and the step limit')
    local = [row(0, 7, STEP, 4.0, call=MEAN), row(1, 6, BETWEEN, 4.2, state='R')]
    text = verdict.judge(limits, 'node0', local, {}, 100 * S, 2.0)
    assert 'limit 3 s per step or evaluation batch, set by --watchdog' in text, text
    stuck = [row(0, 0, STARTUP, 901.0, call='bcast_obj'),
             row(1, 0, STARTUP, 901.0, state='S', call_age=895.0)]
    text = verdict.judge(limits, 'node0', stuck, {}, 100 * S, 2.0)
    assert 'start-up limit 900 s, the default: the larger of 900 s and the step limit (set ' \
        'it with CHAINERMN_TORUS_WATCHDOG_STARTUP)' in text, text
    assert board_layout.source_index(board_layout.STEP_SOURCES, 'CHAINERMN_TORUS_WATCHDOG') \
        == 0 and board_layout.source_index(board_layout.STEP_SOURCES,
                                           "the optimizer's watchdog=") == 2
