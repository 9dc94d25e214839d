"""What each all-reduce algorithm does, with no MPI: the bottom layer of the package.

For one segment of the packed buffer, each algorithm family says once which MPI calls it
makes (group and bytes of each: its *schedule*) and what they cost in the alpha-beta model.
The communicators (``communicators/``) run those calls and are checked call for call
against the schedules (tests/simulation/test_schedules_mpi.py); the planner, the
simulator, ``auto``, the benchmark rows and the tests read the variants table here.

  base           the seam every algorithm fills (Algorithm)
  collectives    the MPI collectives the algorithms are built from: calls and costs
  segments       how a buffer is cut into segments, and the gradient sets' segments
  gradient_sets  the benchmark models' parameter shapes and bytes
  flat           pure_allreduce: one MPI_Allreduce (flat, or node-aware as MPICH runs it)
  torus          rsaa: reduce-scatter, column all-reduce, all-gather (and the shared shape)
  rsap           rsap: the torus with put rounds (put_rounds), fence or notify
  shm            the row phases in node-shared memory
  variants       the table: every variant's communicator, options, algorithm, rows
  schedule       a variant's calls for a whole call (Setup, call_calls, calls_of)

Nothing here imports mpi4py, so login nodes and the job-script generator can read it.
"""
