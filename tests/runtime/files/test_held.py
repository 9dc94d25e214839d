"""A shared directory judged component by component and held (runtime.files.held): links
one level up and directories swapped after the check (issue 72's items 1 and 2) on the walk
and the held descriptor alone, both with openat2 and with the component walk."""
import os
import stat

import pytest

from chainermn_torus.errors import UnsafePath
from chainermn_torus.runtime.files import held
from tests.other_user import OTHER_UID, as_other, needs_root, shared_dir  # noqa: F401

WAYS = [pytest.param(True, id='openat2'), pytest.param(False, id='component-walk')]


@pytest.fixture(params=WAYS)
def walk(request):
    if request.param and not held.openat2_available():
        pytest.skip('this kernel has no openat2 (Linux 5.6 and later): the component walk serves')
    return lambda path, **kw: held.walk(str(path), 'the test directory',
                                        use_openat2=request.param, **kw)


def refused(walk, path, **kw):
    with pytest.raises(UnsafePath) as e:
        walk(path, **kw)
    text = str(e.value)
    assert text.startswith(f'chainermn_torus: refusing the test directory {path}: ') \
        and '\n' not in text, text
    return e.value


def files_of(path):
    return {n: open(os.path.join(path, n), 'rb').read() for n in sorted(os.listdir(path))}


def test_writes_go_to_the_directory_judged_after_it_is_swapped_for_a_link(walk, tmp_path):
    ck = tmp_path / 'proj' / 'ck'
    ck.mkdir(parents=True, mode=0o700)
    other = tmp_path / 'other_experiment'
    other.mkdir(mode=0o700)
    (other / 'latest.json').write_text('{"iteration": 10}')
    before = files_of(other)
    with walk(ck) as h:
        h.write_atomic('rank0.npz', lambda f: f.write(b'one'))
        assert h.moved() is None
        os.rename(str(ck), str(tmp_path / 'proj' / 'ck.moved'))    # the swap, after the check
        ck.symlink_to(str(other))
        h.write_atomic('latest.json', lambda f: f.write(b'{"iteration": 28}'))
        assert h.remove_own('rank0.npz')
        line = h.moved()
        assert line and 'renamed or replaced after the job judged it' in line and '\n' not in line
        assert h.moved() is None                                   # said once
    assert files_of(other) == before                                # byte for byte
    assert files_of(tmp_path / 'proj' / 'ck.moved') == {'latest.json': b'{"iteration": 28}'}


def test_a_users_own_link_on_the_way_is_followed(walk, tmp_path):
    real = tmp_path / 'lustre' / 'me'
    (real / 'ck').mkdir(parents=True, mode=0o700)
    (tmp_path / 'scratch').symlink_to(str(real))                   # ~/scratch -> /lustre/$USER
    (tmp_path / 'rel').symlink_to('lustre/me')                      # relative, too
    for via in ('scratch', 'rel'):
        with walk(tmp_path / via / 'ck') as h:
            assert os.path.samestat(os.fstat(h.fd), os.stat(str(real / 'ck')))


def test_a_link_where_others_can_write_is_refused_unless_trusted(walk, tmp_path):
    shared = tmp_path / 'shared'
    shared.mkdir()
    shared.chmod(0o1777)                                            # sticky, as /tmp
    victim = tmp_path / 'v'
    (victim / 'ck_other').mkdir(parents=True, mode=0o700)
    (shared / 'pl').symlink_to(str(victim))
    e = refused(walk, shared / 'pl' / 'ck_other')
    assert "its component {} is a symbolic link to '{}': it lies in a directory everyone " \
           "can write (mode 1777)".format(shared / 'pl', victim) in str(e), str(e)
    assert e.trust_helps
    with walk(shared / 'pl' / 'ck_other', trusted=True) as h:
        assert os.path.samestat(os.fstat(h.fd), os.stat(str(victim / 'ck_other')))


def test_a_component_others_can_write_is_refused_but_a_sticky_one(walk, tmp_path):
    parent = tmp_path / 'project'
    (parent / 'ck').mkdir(parents=True, mode=0o700)
    parent.chmod(0o777)                                             # anyone may rename ck
    e = refused(walk, parent / 'ck')
    assert f'its component {parent} can be written by everyone (mode 777' in str(e)
    assert walk(parent / 'ck', trusted=True).close() is None
    parent.chmod(0o1777)
    walk(parent / 'ck').close()                                     # as under /tmp
    (parent / 'ck').chmod(0o1777)                                   # the last one itself
    assert 'can be written by everyone (mode 1777' in str(refused(walk, parent / 'ck'))
    walk(parent / 'ck', shared=True).close()
    (parent / 'ck').chmod(0o770)
    assert 'can be written by its group (mode 770' in str(refused(walk, parent / 'ck'))


def test_missing_components_are_made_and_judged(walk, tmp_path):
    old = os.umask(0o022)
    try:
        with walk(tmp_path / 'a' / 'b' / 'c', create=True) as h:
            assert stat.S_IMODE(os.fstat(h.fd).st_mode) == 0o700
    finally:
        os.umask(old)
    assert (tmp_path / 'a' / 'b' / 'c').is_dir()
    with pytest.raises(FileNotFoundError, match='no such directory'):
        walk(tmp_path / 'none' / 'x')
    (tmp_path / 'file').write_text('')
    with pytest.raises(NotADirectoryError, match='it is a file owned by'):
        walk(tmp_path / 'file' / 'x')


def test_a_loop_of_links_is_refused(walk, tmp_path):
    (tmp_path / 'a').symlink_to('b')
    (tmp_path / 'b').symlink_to('a')
    assert 'more than 40 symbolic links' in str(refused(walk, tmp_path / 'a' / 'x'))


def test_a_link_that_climbs_resolves_where_the_kernel_would(walk, tmp_path):
    (tmp_path / 'a' / 'inner').mkdir(parents=True, mode=0o700)
    (tmp_path / 'b').mkdir(mode=0o700)
    (tmp_path / 'a' / 'inner' / 'up').symlink_to('../../b')
    with walk(tmp_path / 'a' / 'inner' / 'up') as h:
        assert os.path.samestat(os.fstat(h.fd), os.stat(str(tmp_path / 'b')))


def test_files_inside_are_names_never_paths(tmp_path):
    d = tmp_path / 'd'
    d.mkdir(mode=0o700)
    with held.walk(str(d), 'the test directory') as h:
        fd, name = h.create_unique('x_', '.json')
        os.write(fd, b'{}')
        os.close(fd)
        assert h.read_bytes(name, 'the test file', 10) == b'{}'
        for bad in ('../x', 'a/b', '..', ''):
            with pytest.raises(ValueError, match='a name inside'):
                h.create(bad)
        os.mkfifo(str(d / 'fifo'))
        with pytest.raises(UnsafePath, match='it is a FIFO'):   # at once, never waited on
            h.read_bytes('fifo', 'the test file', 10)
        (d / 'link').symlink_to(name)
        with pytest.raises(UnsafePath, match='a symbolic link'):
            h.read_bytes('link', 'the test file', 10)
        assert not h.remove_own('link') and not h.remove_own('fifo') and (d / 'link').is_symlink()
        with pytest.raises(FileExistsError):
            h.create(name)
        names, complete = h.listing(100, 10.0)
        assert complete and sorted(names) == sorted(['fifo', 'link', name])
        assert h.listing(2, 10.0) == (names[:2], False)
        with pytest.raises(UnsafePath, match='a symbolic link'):
            h.subdirectory('link')


@needs_root
def test_another_users_link_or_directory_on_the_way_is_refused(walk, shared_dir, tmp_path):
    victim = tmp_path / 'v'
    (victim / 'ck_other').mkdir(parents=True, mode=0o700)
    (victim / 'ck_other' / 'checkpoint_5.npz').write_bytes(b'5')
    before = files_of(victim / 'ck_other')
    pl = os.path.join(shared_dir, 'pl')
    as_other(os.symlink, str(victim), pl)                      # ln -s /tmp/v /tmp/shared/pl
    assert os.lstat(pl).st_uid == OTHER_UID
    e = refused(walk, os.path.join(pl, 'ck_other'))
    assert f'its component {pl} is a symbolic link to ' in str(e)
    assert 'owned by nobody (uid 65534)' in str(e)
    theirs = os.path.join(shared_dir, 'theirs')
    as_other(os.mkdir, theirs, 0o755)
    assert f'its component {theirs} is a directory owned by nobody (uid 65534)' in \
        str(refused(walk, os.path.join(theirs, 'ck')))
    assert files_of(victim / 'ck_other') == before
