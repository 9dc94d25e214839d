"""Files at predictable names (runtime.files.held, runtime.files.atomic): made new, never through a
link planted under the name, refused in one line that names the owner; an atomic write
interrupted anywhere leaves no temporary file, and never removes one that is not its own."""
import os

import pytest

from chainermn_torus.errors import UnsafePath
from chainermn_torus.runtime.files import atomic, held


def test_a_link_planted_under_the_name_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / 'victim'
    victim.write_text('precious')
    link = tmp_path / 'out.rank0.events'
    os.symlink(str(victim), str(link))
    place = held.as_named(str(tmp_path))
    with pytest.raises(UnsafePath) as e:
        place.create(link.name, replace_own=True)
    assert str(e.value).startswith(f'chainermn_torus: refusing to write {link}: a symbolic link '
                                   'owned by ') and '\n' not in str(e.value)
    with pytest.raises(UnsafePath):
        place.open_append(link.name)
    fifo = tmp_path / 'fifo.events'
    os.mkfifo(str(fifo))
    with pytest.raises(UnsafePath) as e:  # refused at once: no open waits on a FIFO
        place.open_append(fifo.name)
    assert 'a FIFO owned by' in str(e.value)
    with pytest.raises(UnsafePath):
        atomic.atomic_write(str(tmp_path / 'x.json'), lambda f: f.write(b'{}'),
                            tmp=str(link))
    assert victim.read_text() == 'precious' and os.path.islink(str(link))


def test_our_own_leftover_is_replaced_and_appending_keeps_what_is_there(tmp_path):
    path = tmp_path / 'log'
    path.write_text('left by an earlier process with this pid\n')
    place = held.as_named(str(tmp_path))
    with os.fdopen(place.create(path.name, replace_own=True), 'w') as f:
        f.write('new\n')
    with os.fdopen(place.open_append(path.name), 'w') as f:
        f.write('more\n')
    assert path.read_text() == 'new\nmore\n'


@pytest.mark.parametrize('fault', [KeyboardInterrupt, OSError])
def test_an_interrupted_atomic_write_leaves_no_temporary_and_the_old_file(tmp_path, fault):
    path = tmp_path / 'latest.json'
    path.write_text('old')

    def write(f):
        f.write(b'half')
        raise fault('interrupted')
    with pytest.raises(fault):
        atomic.atomic_write(str(path), write)
    assert sorted(os.listdir(str(tmp_path))) == ['latest.json'] and path.read_text() == 'old'
