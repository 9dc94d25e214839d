"""What a job asks for, whatever the system: the description the scripts are written from,
and the checks every system shares."""
import collections
import math
import re

from chainermn_torus import settings_table
from chainermn_torus.algorithms.variants import check_grid_option
from chainermn_torus.communicators._grid import parse_grid

__all__ = ['Job', 'FIELDS', 'AS_MANY']

# name -> default (None: required or unset)
FIELDS = collections.OrderedDict([
    ('system', None), ('nodes', None), ('ranks_per_node', 1), ('hours', 1.0),
    ('communicator', 'rsap'), ('grid', None), ('threads', None), ('loader_cores', None),
    ('mpi', None), ('launcher', None), ('pmi', None), ('venv', None), ('module', ()),
    ('queue', None), ('group', None), ('node_shape', None), ('llio_volumes', '/vol0004'),
    ('watchdog', 900), ('workdir', None), ('name', 'chainermn-torus'), ('command', ()),
    ('venv_unchecked', False), ('elastic', False), ('min_nodes', 1),
    ('memory_snapshots', None), ('virtual_ranks', None),
])


AS_MANY = 0  # --virtual-ranks given bare: as many as the job's ranks
MAX_HOURS = 8760  # a year: beyond any batch system's limit, a typo
# The fields written into directive lines and a double-quoted echo as they are: there a
# newline started a script line of its own, and $(...) ran.
WORDS = ('queue', 'group', 'node_shape', 'llio_volumes', 'name', 'mpi', 'launcher', 'pmi')
_WORD = re.compile(r'^[A-Za-z0-9_/][A-Za-z0-9_.+:@=,/-]{0,127}$')


class Job(collections.namedtuple('Job', list(FIELDS))):
    """One batch job: the system's name, the shape (nodes x ranks per node, hours), the
    communicator and grid, threads and loader cores per rank, the MPI library and how it
    starts (launcher, PMI; ``elastic``: under ``chainermn-torus elastic``, going on on the
    nodes left, at least ``min_nodes``), the environment (venv, modules), the site's accounting
    (queue, group; Fugaku's node shape and LLIO volumes), the watchdog, the directory (local), the
    job's name, the virtual ranks it computes as and the training command."""

    def __new__(cls, **given):
        unknown = set(given) - set(FIELDS)
        if unknown:
            raise TypeError('Job has no field(s) {}'.format(', '.join(sorted(unknown))))
        values = dict(FIELDS, **given)
        values['module'] = tuple(values['module'] or ())
        command = list(values['command'] or ())
        values['command'] = tuple(command[1:] if command[:1] == ['--'] else command)
        return super().__new__(cls, **values)

    @classmethod
    def from_args(cls, args):
        """From the command line's namespace (only the fields a Job has); a bare
        --virtual-ranks is the job's ranks."""
        given = {k: getattr(args, k) for k in FIELDS if hasattr(args, k)}
        if given.get('virtual_ranks') == AS_MANY:
            given['virtual_ranks'] = given['nodes'] * given.get('ranks_per_node', 1)
        return cls(**given)

    @property
    def procs(self):
        return self.nodes * self.ranks_per_node

    def check(self):
        """The refusals every system shares (ValueError, naming what is allowed)."""
        if self.nodes < 1 or self.ranks_per_node < 1:
            raise ValueError(f'--nodes and --ranks-per-node must be >= 1, got {self.nodes} '
                             f'and {self.ranks_per_node}')
        if not (self.watchdog == 0 or 0 < self.watchdog <= settings_table.MAX_SECONDS):
            raise ValueError('--watchdog must be 0 (off) or a number of seconds > 0 and at '
                             f'most {settings_table.MAX_SECONDS} (a year), got {self.watchdog}')
        if not 0 < self.hours <= MAX_HOURS or not math.isfinite(self.hours):
            raise ValueError(f'--hours must be > 0 and at most {MAX_HOURS} (a year), '
                             f'got {self.hours:g}')
        for field in WORDS:
            value = getattr(self, field)
            if value is not None and not _WORD.match(str(value)):
                raise ValueError(
                    '--{} must be letters, digits and _.+:@=,/- (at most 128; no spaces, '
                    'quotes, $ or newlines: it is written into the batch script), got '
                    '{!r}'.format(field.replace('_', '-'), value))
        if self.loader_cores is not None and self.loader_cores < 0:
            raise ValueError(f'--loader-cores must be >= 0, got {self.loader_cores}')
        if self.elastic and self.grid:
            raise ValueError('--elastic goes on with fewer ranks after a lost node, and --grid '
                             f'{self.grid} pins the rank count: leave --grid out (the grid follows '
                             'the '
                             'ranks)')
        if self.memory_snapshots is not None and (not self.elastic or
                                                  self.memory_snapshots < 1):
            raise ValueError('--memory-snapshots is for --elastic and a count of iterations '
                             '>= 1, got {}{}'.format(self.memory_snapshots, '' if self.elastic
                                                     else ' without --elastic'))
        if self.virtual_ranks is not None and self.virtual_ranks < self.procs:
            raise ValueError(f'--virtual-ranks {self.virtual_ranks} is fewer than the job\'s '
                             f'{self.procs} ranks ({self.nodes} nodes x {self.ranks_per_node}): '
                             f'give at least {self.procs}, or --virtual-ranks alone (as many)')
        if not 1 <= self.min_nodes <= self.nodes:
            raise ValueError(f'--min-nodes must be from 1 to --nodes ({self.nodes}), '
                             f'got {self.min_nodes}')
        if self.grid:
            check_grid_option(self.communicator, self.grid)
            parse_grid(self.grid, self.procs,
                       source=f'--grid for {self.nodes} nodes x {self.ranks_per_node} ranks per '
                              'node')
