"""What runs beside training in every rank's process, in rooms:

* ``watch/``: the watch (the abort hook, the watchdog, the watcher processes);
* ``chainer_glue/``: where the package meets Chainer (importing it, its private names used,
  every patch to its objects);
* ``files/``: files on a shared machine (atomic writes, names made new, temporaries, /dev/shm,
  the sweep of dead writers' files);
* ``cpu/``: what a rank does with its cores and memory (the thread budget, numba kernels,
  the NaN/Inf counter, the allocator's options);
* at the top: start-up of the process-wide pieces (``startup``), the phase timeline
  (``timeline``), saying a line (``report``), agreeing across ranks (``agree``), reading
  processes (``processes``) and the job's world (``world``)."""
