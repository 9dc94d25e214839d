"""The node watcher's verdicts (runtime.node_watch.judge) from progress rows, and who watches
whom; the whole path on real ranks is in test_faults.py, test_fault_matrix.py and the
emulated cluster's frozen-node rows."""
import collections

from chainermn_torus.runtime import node_watch as nw, progress_board as pb

S = 1e9  # ns


class FakeBoard(object):
    limit_s, outside = 3.0, 10

    def limit(self, phase):
        return {pb.STEP: 3.0, pb.EVALUATION: 3.0, pb.BETWEEN: 30.0,
                pb.CHECKPOINT: 30.0}.get(phase)


def row(rank, finished, phase, age, count=0):
    order = {pb.BETWEEN: 0, pb.EVALUATION: 1, pb.CHECKPOINT: 2, pb.STEP: 3}
    return [rank, [finished, order.get(phase, 0), count], phase, age]


def peer(host, rows, heard_s_ago=0.5, gone=False, now=100 * S):
    return {'host': host, 'heard': now - heard_s_ago * S, 'rows': rows, 'gone': gone}


def test_nothing_is_said_while_every_rank_moves():
    local = [row(0, 7, pb.STEP, 0.2), row(1, 7, pb.BETWEEN, 25.0)]  # within both limits
    assert nw.judge(FakeBoard(), 'node0', local, {}, 100 * S, 2.0) is None


def test_the_rank_behind_on_another_node_is_named_with_its_host():
    local = [row(0, 7, pb.STEP, 4.0), row(1, 7, pb.STEP, 4.0)]
    peers = {1: peer('node1', [row(2, 7, pb.STEP, 4.0), row(3, 6, pb.BETWEEN, 4.2)])}
    text = nw.judge(FakeBoard(), 'node0', local, peers, 100 * S, 2.0)
    assert text.startswith('chainermn_torus watchdog: the job waits for rank 3 on node1, '
                           'stopped between steps 6 and 7'), text
    assert '(rank 0 (node0) has made no progress for 4 s in training step 8' in text, text


def test_a_silent_node_is_named_before_any_rank():
    local = [row(0, 7, pb.STEP, 3.5)]
    peers = {1: peer('node1', [row(2, 7, pb.STEP, 0.1), row(3, 7, pb.STEP, 0.1)],
                     heard_s_ago=3.4),
             2: peer('node2', [row(4, 6, pb.BETWEEN, 3.0)], gone=True, heard_s_ago=9)}
    text = nw.judge(FakeBoard(), 'node0', local, peers, 100 * S, 2.0)
    assert 'the job waits for node node1 (ranks 2, 3) silent for 3 s: every process there ' \
        'stopped, or the node was lost' in text, text
    assert 'node2' not in text  # it said goodbye: finished, not lost


def test_an_evaluation_batch_has_the_step_limit_and_the_stopped_rank_is_furthest_behind():
    local = [row(0, 4, pb.EVALUATION, 3.5, count=40), row(1, 4, pb.EVALUATION, 3.6, count=3)]
    text = nw.judge(FakeBoard(), 'n', local, {}, 100 * S, 2.0)
    assert 'the job waits for rank 1 on n, stopped in the evaluation after step 4 (batch 3)' \
        in text, text
    assert '(limit 3 s per step or evaluation batch' in text, text


def test_every_rank_at_the_same_point_is_a_deadlock_not_a_rank():
    local = [row(0, 9, pb.STEP, 5.0), row(1, 9, pb.STEP, 5.0)]
    peers = {1: peer('node1', [row(2, 9, pb.STEP, 5.0)])}
    text = nw.judge(FakeBoard(), 'node0', local, peers, 100 * S, 2.0)
    assert 'the job waits for none: every rank is in training step 10' in text, text
    assert 'all wait in the same call' in text


def test_every_node_is_watched_and_heartbeats_go_to_its_watchers():
    for n in (1, 2, 3, 32, 33, 200):
        watched_by = collections.Counter()
        for me in range(n):
            for other in nw.monitored(me, n):
                watched_by[other] += 1
                assert me in nw.watchers_of(other, n)  # other's heartbeats reach me
        expected = n - 1 if n <= nw.MAX_ALL else nw.RING
        assert all(watched_by[i] == expected for i in range(n)), (n, watched_by)


def test_a_node_never_heard_from_is_not_taken_for_a_frozen_one():
    # UDP blocked between nodes: no heartbeat ever arrived from node1. That is no verdict
    # (its ranks are still watched through the ranks that wait for them).
    local = [row(0, 7, pb.BETWEEN, 0.5)]
    never = dict(peer('node1', [], heard_s_ago=60), seen=False)
    assert nw.judge(FakeBoard(), 'node0', local, {1: never}, 100 * S, 2.0) is None
    heard = dict(never, seen=True)
    assert 'node node1' in nw.judge(FakeBoard(), 'node0', local, {1: heard}, 100 * S, 2.0)


def test_the_first_node_says_once_which_watchers_it_never_heard(capsys):
    board = pb.Board.create(1, 3.0, 10)
    try:
        w = nw.Watcher(board.path, leader_pid=0)
        table = [{'host': 'node0', 'addrs': ['127.0.0.1'], 'port': w.sock.getsockname()[1]},
                 {'host': 'node1', 'addrs': ['127.0.0.1'], 'port': 9}]
        w.configure(table, 0)
        w.unheard(w.started + 1 * S)  # within the grace: nothing yet
        assert capsys.readouterr().err == ''
        w.unheard(w.started + 10 * S)
        w.unheard(w.started + 20 * S)  # once
        err = capsys.readouterr().err
        assert err.count('\n') == 1 and 'no heartbeat from the watcher(s) of 1 node(s) ' \
            '(node1)' in err and 'UDP between nodes seems blocked' in err, err
        w.sock.close()
    finally:
        board.close(remove=True)
