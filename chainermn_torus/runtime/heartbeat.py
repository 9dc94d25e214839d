"""The node watchers' heartbeats: who watches whom, and the UDP messages between them.

Every node's watcher sends its ranks' rows (``verdict.summary``) to the watchers that
watch it, a ``verdict`` when it ends the job, and a ``bye`` when its ranks finished; at the
addresses every node's leader rank shared at start (all the node's IPv4 addresses, so any
network that routes will do). Up to ``MAX_ALL`` nodes every watcher hears every other;
beyond, each node is watched by the next ``RING`` nodes, so the traffic per node stays
constant. UDP: a message may be lost, so a verdict and a goodbye are sent three times.
"""
import json
import socket

__all__ = ['Heartbeat', 'monitored', 'watchers_of', 'RING', 'MAX_ALL']

RING = 4       # beyond MAX_ALL nodes, the nodes that watch each node
MAX_ALL = 32   # up to this many nodes, every watcher hears every other


def monitored(me, n):
    """The nodes node ``me`` of ``n`` watches (and whose heartbeats it expects)."""
    if n <= MAX_ALL:
        return [i for i in range(n) if i != me]
    return sorted({(me + k) % n for k in range(1, RING + 1)} - {me})


def watchers_of(me, n):
    """The nodes that watch node ``me``: where its heartbeats go."""
    if n <= MAX_ALL:
        return [i for i in range(n) if i != me]
    return sorted({(me - k) % n for k in range(1, RING + 1)} - {me})


class Heartbeat(object):
    """This node's socket (bound at once: its port goes into the table the leader ranks
    share) and, once ``join``ed, its peers: {node: {'host', 'heard' (ns), 'rows', 'gone',
    'seen'}} for the nodes it watches, and the addresses its messages go to."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(('0.0.0.0', 0))
        self.port = self.sock.getsockname()[1]
        self.me, self.peers, self.targets = -1, {}, []

    def join(self, table, me, now):
        """``table``: every node's {'host', 'addrs', 'port'}; ``me``: this node's index."""
        n = len(table)
        self.me = me
        self.peers = {i: {'host': table[i]['host'], 'heard': now, 'rows': [], 'gone': False,
                          'seen': False} for i in monitored(me, n)}
        self.targets = [(a, table[i]['port']) for i in watchers_of(me, n)
                        for a in table[i]['addrs']]
        self.sock.setblocking(False)

    def send(self, kind, rows=None, times=1):
        data = json.dumps({'kind': kind, 'node': self.me, 'rows': rows or []}).encode()
        for _ in range(times):
            for target in self.targets:
                try:
                    self.sock.sendto(data, target)
                except OSError:
                    pass  # an address of the peer this node cannot reach

    def receive(self, now):
        """Read what arrived: the peers' rows updated; True once a verdict came (another
        node found the job stalled)."""
        while True:
            try:
                data, _ = self.sock.recvfrom(65536)
            except BlockingIOError:
                return False
            try:
                msg = json.loads(data.decode())
                node = int(msg['node'])
            except (ValueError, KeyError, TypeError):
                continue
            if msg.get('kind') == 'verdict':
                return True
            peer = self.peers.get(node)
            if peer is None:
                continue
            peer['heard'] = now
            peer['seen'] = True
            if msg.get('kind') == 'bye':
                peer['gone'] = True
            else:
                peer['rows'] = msg.get('rows', [])
