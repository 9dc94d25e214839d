"""The watch: what names the rank or node a job waits for, says how a rank died, and ends
the job instead of leaving it to hang. Three kinds of processes beside the ranks (the
picture: docs/development.md, "The watch"):

* the start-up watcher of each rank (``startup_watch``), from its first instruction to its
  communicator;
* the rank's own watcher (``rank_watch``, started by the abort hook, ``abort``): its death,
  a SIGTERM it cannot act on, a lost node watcher;
* the node's watcher (``node_watch``, started by the watchdog, ``watchdog``): the node's
  progress board (``progress_board``), its ranks' process states, the heartbeats between
  nodes (``heartbeat``), the verdict (``verdict``), and the end of a stalled node
  (``node_end``).

The first two, with the small core they share with the rest (what /proc says of a process,
the job's ranks of a node, the board's layout), are the package ``chainermn_torus.watchers``:
standard library only, started with that package alone on the path.
"""
