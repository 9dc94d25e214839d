"""What runs beside training in every rank's process: the start-up of the process-wide pieces
(``startup``), the abort hook (``abort``), the watchdog (``watchdog``), the phase timeline
recorder (``timeline``) and the BLAS/numba thread budget (``threads``)."""
