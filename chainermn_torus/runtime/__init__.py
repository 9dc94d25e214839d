"""What runs beside training in every rank's process: the start-up of the process-wide pieces
(``startup``), the watch (``watch``: the abort hook, the watchdog and the watcher processes),
the phase timeline recorder (``timeline``) and the BLAS/numba thread budget (``threads``)."""
