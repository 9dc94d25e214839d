"""The watch's standalone part: the processes beside the ranks that must start in
milliseconds, need no MPI and outlive their rank, and the small core they share with the
rest of the package. Standard library only, and nothing else of the package (the bottom
layer of .importlinter): ``command.argv`` starts one as ``python -I -S`` with this package
alone on its path, imported normally (``__main__``).

* ``processes``: what /proc says of a process (the one reader);
* ``ranks``: the job's ranks of a node, the names they hold, the one way to end them;
* ``board_layout``: the progress board's rows, the phase table, the communication calls;
* ``temporaries``: the atomic writes' temporary names, a dead writer's removed;
* ``startup_watch``: each rank's watcher before its communicator (and its rank side);
* ``rank_watch``: each rank's watcher for its life: its death said, SIGTERM's grace.

The node's watcher (``runtime.watch.node_watch``) imports the package, and is not here.
"""
