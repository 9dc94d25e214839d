"""One description per system the job scripts are written for: its node, its MPI libraries,
its header, settings and launch templates, and the few methods where it differs. Adding a
site is one class here (or ``register(system)`` from outside) plus its test; nothing else
branches on a system's name.

Templates are ``string.Template`` texts over the values ``render`` computes (``$$`` is a
literal ``$``); a system adds its own values in ``values``.
"""
import collections
import os
import shlex
import string
import sys

from chainermn_torus.tools import oversubscribe

__all__ = ['System', 'Node', 'SYSTEMS', 'RETIRED', 'get', 'register', 'unregister']

# Cores, hardware threads per core, and the cores left to the operating system.
Node = collections.namedtuple('Node', 'cores smt os_cores')


class System:
    name = None
    about = ''              # a paragraph for the command's help
    node = None             # Node where the system fixes the node's shape, else None
    mpis = ('mpich',)       # the MPI libraries its scripts know; the first is the default
    needs_group = False     # PJM charges a job to a project group
    has_node_shape = False  # a Tofu job shape (--node-shape)
    chooses_launcher = False  # srun or the MPI's mpiexec (--launcher, --pmi)
    header = ''
    settings = ''
    launch = ''             # a template, or {mpi: template}
    # Where the rank count follows the allocation: the shell expression of its node count.
    # A job that lost a node is resubmitted on fewer with the same script, starts that many
    # ranks, and --auto-resume continues its checkpoint on them. A --grid pins P.
    allocated_nodes = None
    queue_format = '{}'     # the header's queue line; '{}' alone: none in the header
    venv_python = False     # a bare "python" command becomes the venv's (local)
    # --elastic: the header line that keeps the job when one of its nodes fails, or None
    # where the system's scripts cannot (the reason: ``elastic_refusal``)
    elastic_header = None
    elastic_refusal = 'its batch system ends a job that loses a node'

    def check(self, job):
        """This system's refusals (ValueError): the MPI library, the node's cores, its
        options that other systems do not have."""
        mpi = self.mpi(job)
        if mpi not in self.mpis:
            raise ValueError('--mpi {} on {}: its scripts know {}'.format(
                mpi, self.name, ', '.join(self.mpis)))
        if self.node:
            usable = self.node.cores - self.node.os_cores
            if job.ranks_per_node > usable:
                raise ValueError(f'{self.name} nodes have {usable} cores for ranks ({self.node.cores} in all, {self.node.os_cores} kept for the '
                                 f'OS): --ranks-per-node {job.ranks_per_node} does not fit')
        for option, given in (('--launcher', job.launcher), ('--pmi', job.pmi)):
            if given is not None and not self.chooses_launcher:
                raise ValueError(f'{option} {given} is for slurm (srun, or the MPI\'s mpiexec in the '
                                 f'allocation); {self.name} scripts start their ranks as {self.name} does: leave '
                                 'it out')
        if job.elastic and self.elastic_header is None:
            raise ValueError('--elastic is for slurm (sbatch --no-kill keeps a job that loses a '
                             f'node, and a new step starts on the nodes left); on {self.name}, {self.elastic_refusal}: '
                             'resubmit with --auto-resume instead')
        if job.node_shape is not None and not self.has_node_shape:
            raise ValueError(f'--node-shape is for fugaku (a Tofu job shape), not {self.name}')
        if self.needs_group and not job.group:
            raise ValueError(f'--group is required for {self.name}: PJM charges the job to a project '
                             'group (your account page names it)')

    def mpi(self, job):
        return job.mpi or self.mpis[0]

    def cores(self, job):
        """(cores per rank, compute threads per rank, loader cores per rank)."""
        if self.node:
            per_rank = (self.node.cores - self.node.os_cores) // job.ranks_per_node
            loader = job.loader_cores
            if loader is None:  # OFP with one rank: 64 compute + 2 loader cores (Hanawa & Tamura)
                loader = 0 if per_rank == 1 else (2 if per_rank >= 32 else 1)
            threads = job.threads or per_rank - loader
        else:
            loader = job.loader_cores or 0
            threads = job.threads or 1
            per_rank = threads + loader
        if threads < 1 or threads + loader > per_rank:
            raise ValueError(f'{per_rank} cores per rank cannot hold {threads} compute thread(s) and {loader} loader '
                             'core(s); lower --threads or --loader-cores, or use fewer ranks '
                             'per node')
        return per_rank, threads, loader

    def default_queue(self, job):
        return ''

    def launcher(self, job, mpi):
        """What starts the ranks: 'mpiexec' (the MPI's) or 'srun'."""
        return 'mpiexec'

    def launch_template(self, values):
        return self.launch

    def values(self, job, values):
        """This system's own template values, from the common ones."""
        return {}

    def workdir_line(self, values):
        return ''


class Ofp(System):
    """Oakforest-PACS: Fujitsu PJM, Intel MPI over Omni-Path, KNL (68 cores, 4 threads
    each). Cores 0-1 (and their hyper-threads) are left to the OS, as the centre's own
    scripts do; PSM2's own pinning is turned off (HFI_NO_CPUAFFINITY=1) so Intel MPI's
    domains hold; regular-flat runs under numactl --preferred=1 (MCDRAM)."""
    name = 'ofp'
    node = Node(cores=68, smt=4, os_cores=2)
    mpis = ('impi',)
    needs_group = True
    header = '''#PJM -L rscgrp=${queue}
#PJM -L node=${nodes}
#PJM --mpi proc=${procs}
#PJM -L elapse=${elapse}
#PJM -g ${group}
#PJM -N ${name}
#PJM -j
# Oakforest-PACS: KNL, 68 cores x 4 hardware threads, quadrant mode; the resource group
# chooses the memory mode (regular-flat: MCDRAM is NUMA node 1, used through numactl in the
# launch line; regular-cache: MCDRAM caches DDR4).'''
    # PSM2 pins each process to one CPU at MPI_Init unless told not to.
    settings = '''# PSM2 (Omni-Path) pins each process to one CPU at MPI_Init unless told not to; then
# Intel MPI's domains decide: cores 0-1 and their hyper-threads stay with the OS, each rank
# gets ${cpus} cores (${pin_cpus} logical CPUs, 4 per KNL core).
export HFI_NO_CPUAFFINITY=1
export I_MPI_PIN_PROCESSOR_EXCLUDE_LIST=${exclude_cpus}
export I_MPI_PIN_DOMAIN=${pin_domain}
export I_MPI_FABRICS=shm:ofi FI_PROVIDER=psm2
export OMP_NUM_THREADS=${threads} KMP_AFFINITY=granularity=fine,compact,1,0
'''
    launch = 'mpiexec.hydra -n ${procs} -ppn ${ranks_per_node}${numactl}'

    def default_queue(self, job):
        return 'regular-cache'

    def values(self, job, values):
        per_rank = values['cpus']
        return {
            # cores 0-1 and their hyper-threads (CPU c + 68 k)
            'exclude_cpus': ','.join(str(c + self.node.cores * k)
                                     for k in range(self.node.smt)
                                     for c in range(self.node.os_cores)),
            'pin_domain': 'node' if job.ranks_per_node == 1 else f'{self.node.smt * per_rank}:compact',
            'pin_cpus': self.node.smt * per_rank,
            'numactl': ' numactl --preferred=1' if 'flat' in values['queue'] else ''}


class Fugaku(System):
    """Fugaku (A64FX, 48 cores in 4 CMGs): PJM with a node shape, resource group by size
    (small up to 384 nodes), max-proc-per-node, LLIO cache of the volumes the job reads,
    each rank's output in its own file. (The K computer is retired; its SPARC64 VIIIfx
    cannot run numba or Python >= 3.6, so there is no k target.)"""
    name = 'fugaku'
    node = Node(cores=48, smt=1, os_cores=0)  # + 2-4 assistant cores the OS already has
    mpis = ('fujitsu',)
    needs_group = True
    has_node_shape = True
    SMALL_MAX = 384  # nodes: 'small' up to here, 'large' above (its resource groups)
    header = '''#PJM -L "node=${node_shape}"
#PJM -L "rscgrp=${queue}"
#PJM -L "elapse=${elapse}"
#PJM --mpi "max-proc-per-node=${ranks_per_node}"
#PJM -g ${group}
#PJM -N ${name}
#PJM -x PJM_LLIO_GFSCACHE=${llio_volumes}
#PJM -s
# Fugaku: A64FX, 48 compute cores in 4 CMGs (NUMA nodes of 12 cores); ${ranks_per_node}
# rank(s) per node. Each rank's stdout and stderr go to files of their own under
# ./${name}.<job id>/ (Fujitsu MPI's -stdout-proc/-stderr-proc, grouped by rank / 1000).'''
    settings = '''export OMP_NUM_THREADS=${threads}
export PLE_MPI_STD_EMPTYFILE=off
'''
    launch = ('mpiexec -n ${procs} -stdout-proc ./${name}.%j/%/1000r/stdout '
              '-stderr-proc ./${name}.%j/%/1000r/stderr')

    def check(self, job):
        super().check(job)
        if job.node_shape is not None:
            _check_node_shape(job.node_shape, job.nodes)

    def default_queue(self, job):
        return 'small' if job.nodes <= self.SMALL_MAX else 'large'

    def values(self, job, values):
        return {'node_shape': job.node_shape or str(job.nodes),
                'llio_volumes': job.llio_volumes}


def _check_node_shape(shape, nodes):
    """Fugaku node shapes: 1 to 3 dimensions "A", "AxB", "AxBxC" whose product is --nodes."""
    parts = shape.lower().split('x')
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError('--node-shape must be 1 to 3 positive integers joined by "x" (e.g. '
                         f'4x4x4), got {shape!r}')
    product = 1
    for p in parts:
        product *= int(p)
    if product != nodes:
        raise ValueError(f'--node-shape {shape} holds {product} nodes but --nodes is {nodes}')


# Open MPI's mpiexec passes no variable it is not told to (Hydra and srun pass all).
_OPENMPI = ('mpiexec -n ${procs} --map-by ppr:${ranks_per_node}:node:PE=${cpus} '
            '--bind-to core${forward}')


class Slurm(System):
    """sbatch + srun: srun is given --cpus-per-task itself (Slurm 22.05-23.02 no longer
    passes the allocation's on), --mpi= for the MPI library (pmi2 / pmix), one hardware
    thread per core; or (--launcher mpiexec, MPICH's default) the MPI's own mpiexec inside
    the allocation, which binds the ranks itself."""
    name = 'slurm'
    mpis = ('mpich', 'impi', 'openmpi')
    chooses_launcher = True
    header = '''#SBATCH --job-name=${name}
#SBATCH --nodes=${nodes}
#SBATCH --ntasks-per-node=${ranks_per_node}
#SBATCH --cpus-per-task=${cpus}
#SBATCH --hint=nomultithread
#SBATCH --time=${elapse}
${queue_line}'''
    settings = '''export OMP_NUM_THREADS=${threads}
${pmi_settings}'''
    launch = {'srun': 'srun --mpi=${pmi} --cpus-per-task=${cpus} --threads-per-core=1 '
                      '--cpu-bind=cores',
              # MPICH's Hydra starts its proxies with srun (-launcher slurm) and serves PMI
              # itself; it binds the ranks.
              'mpich': 'mpiexec -launcher slurm -n ${procs} -ppn ${ranks_per_node} '
                       '-bind-to core:${cpus}',
              'impi': 'mpiexec.hydra -n ${procs} -ppn ${ranks_per_node} '
                      '-genv I_MPI_PIN_DOMAIN=${cpus}',
              'openmpi': _OPENMPI}
    allocated_nodes = '$${SLURM_JOB_NUM_NODES:-${nodes}}'
    queue_format = '#SBATCH --partition={}'
    # srun --mpi= for each MPI library: MPICH and Intel MPI speak PMI-2 (Intel MPI through
    # Slurm's libpmi2, I_MPI_PMI_LIBRARY), Open MPI 5 needs PMIx. A mismatch starts every
    # rank as a singleton: the launcher's rank-count check names it (runtime.world).
    SRUN_PMI = {'mpich': 'pmi2', 'impi': 'pmi2', 'openmpi': 'pmix'}
    # srun, or the MPI's own mpiexec inside the allocation. MPICH's default is mpiexec:
    # under a real Slurm 22.05 (tests/tools/test_slurm.py), srun --mpi=pmi2 with the MPICH wheel
    # failed now and then in MPI_Init (slurmstepd: "mpi/pmi2: value not properly
    # terminated" on the network-address exchange) and the ranks then hung there; Hydra's
    # own PMI never did.
    LAUNCHER = {'mpich': 'mpiexec', 'impi': 'srun', 'openmpi': 'srun'}

    # A node that fails leaves the job running (the supervisor starts the next step);
    # --no-kill also keeps Slurm from requeueing it for that node.
    elastic_header = '#SBATCH --no-kill'

    def launcher(self, job, mpi):
        return job.launcher or self.LAUNCHER[mpi]

    def elastic_launcher(self, values):
        """(how ``chainermn-torus elastic`` starts each step, the launcher's arguments
        before its hosts): the launch line's own, less its rank counts, which each step
        sets."""
        if values['launcher'] == 'srun':
            return 'srun', string.Template(
                '--mpi=${pmi} --cpus-per-task=${cpus} --threads-per-core=1 '
                '--cpu-bind=cores').substitute(values)
        if values['mpi'] == 'mpich':
            return 'mpiexec', string.Template(
                '-launcher slurm -bind-to core:${cpus}').substitute(values)
        raise ValueError('--elastic with --mpi {} starts its steps with srun: give '
                         '--launcher srun'.format(values['mpi']))

    def launch_template(self, values):
        return self.launch['srun' if values['launcher'] == 'srun' else values['mpi']]

    def values(self, job, values):
        pmi = job.pmi or self.SRUN_PMI.get(values['mpi'], 'pmi2')
        settings = ''
        if values['launcher'] == 'srun' and values['mpi'] == 'impi' and pmi == 'pmi2':
            settings = ('# Intel MPI under srun --mpi=pmi2 loads Slurm\'s PMI-2 library: set '
                        'its path if the site has not\nexport I_MPI_PMI_LIBRARY=${'
                        'I_MPI_PMI_LIBRARY:-/usr/lib64/libpmi2.so}\n')
        return {'pmi': pmi, 'pmi_settings': settings}


class Pbs(System):
    """qsub (PBS Pro select syntax, place=scatter:excl) + the MPI's mpiexec (Hydra's -ppn,
    Open MPI's --map-by ppr)."""
    name = 'pbs'
    mpis = ('mpich', 'impi', 'openmpi')
    header = '''#PBS -N ${name}
#PBS -l select=${nodes}:ncpus=${node_cpus}:mpiprocs=${ranks_per_node}:ompthreads=${threads}
#PBS -l place=scatter:excl
#PBS -l walltime=${elapse}
${queue_line}'''
    settings = '''export OMP_NUM_THREADS=${threads}
'''
    launch = {'mpich': 'mpiexec -n ${procs} -ppn ${ranks_per_node} -bind-to core:${cpus}',
              'impi': 'mpiexec -n ${procs} -ppn ${ranks_per_node} '
                      '-genv I_MPI_PIN_DOMAIN=${cpus}',
              'openmpi': _OPENMPI}
    allocated_nodes = '$$(sort -u "$${PBS_NODEFILE:-/dev/null}" | wc -l)'
    queue_format = '#PBS -q {}'

    def launch_template(self, values):
        return self.launch[values['mpi']]

    def values(self, job, values):
        return {'node_cpus': values['cpus'] * job.ranks_per_node}

    def workdir_line(self, values):
        return 'cd "${PBS_O_WORKDIR:-.}"\n'


class Local(System):
    """this machine: the virtualenv's mpiexec; one node."""
    name = 'local'
    header = '''# This machine, ${procs} ranks (oversubscribed if it has fewer cores).'''
    settings = '${oversubscribed}'
    launch = '${mpiexec} -n ${procs}'
    venv_python = True

    def check(self, job):
        if job.nodes != 1:
            raise ValueError(f'--system local runs on this machine: --nodes must be 1, got {job.nodes}'
                             )
        super().check(job)

    def values(self, job, values):
        return {'mpiexec': shlex.quote(os.path.join(values['venv'] or sys.prefix, 'bin',
                                                    'mpiexec')),
                'workdir': shlex.quote(job.workdir or os.getcwd()),
                'oversubscribed': _oversubscribed(values)}

    def workdir_line(self, values):
        return 'cd {}\n'.format(values['workdir'])


def _oversubscribed(values):
    """More ranks than this machine's cores make waiting ranks sleep instead of spinning,
    with the MPI's own setting (tools/oversubscribe.py); decided where the script runs (the
    machine it was written on may have other cores)."""
    found = oversubscribe.SETTINGS.get(values['mpi'])
    if not found:
        return ''
    return ('# More ranks than cores here: a waiting rank gives its core up instead of '
            'spinning.\nif [ "$(nproc)" -lt {} ]; then\n    export {}\nfi\n'.format(
                values['procs'], ' '.join(f'{k}={v}'
                                          for k, v in sorted(found.items()))))


SYSTEMS = collections.OrderedDict((s.name, s) for s in (Ofp(), Fugaku(), Slurm(), Pbs(),
                                                         Local()))
_BUILT_IN = tuple(SYSTEMS)
RETIRED = {
    'k': 'the K computer was shut down in 2019, and its SPARC64 VIIIfx (Python <= 3.5, no '
         'numba, no LLVM) cannot run this package; --system fugaku writes a job for its '
         'successor',
}


def get(name):
    """The system called ``name`` (ValueError naming the choices, or why it is retired)."""
    if name in RETIRED:
        raise ValueError(f'--system {name}: {RETIRED[name]}')
    if name not in SYSTEMS:
        raise ValueError('unknown system {!r}; choose from {}'.format(name,
                                                                     ', '.join(SYSTEMS)))
    return SYSTEMS[name]


def register(system):
    """Add a System (a site's own) under its name."""
    if not isinstance(system, System) or not system.name or system.name in SYSTEMS:
        raise ValueError('a new system is a System with a name of its own, got {!r}'.format(
            getattr(system, 'name', system)))
    launch = system.launch if isinstance(system.launch, dict) else {'': system.launch}
    for what, template in [('header', system.header), ('settings', system.settings)] + [
            ('launch ' + k, t) for k, t in launch.items()]:
        for m in string.Template.pattern.finditer(template):  # fails here, not in a job
            if m.group('invalid') is not None:
                line = template[:m.start('invalid')].count('\n') + 1
                raise ValueError(f'system {system.name}: its {what} template has a lone "$" on line {line} '
                                 '(write $$ for a literal $, ${name} for a value)')
    SYSTEMS[system.name] = system


def unregister(name):
    if name in SYSTEMS and name not in _BUILT_IN:
        del SYSTEMS[name]
