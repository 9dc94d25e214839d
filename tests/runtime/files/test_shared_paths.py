"""The one rule for paths another user can reach (runtime.files.shared_paths), on its own:
what is refused, in one line naming what is there and whose it is, and what is read."""
import os
import stat

import pytest

from chainermn_torus.errors import UnsafePath
from chainermn_torus.runtime.files import shared_paths
from tests.other_user import OTHER_UID, as_other, needs_root, shared_dir  # noqa: F401
import package_probes


def _refused(path, limit=100, **kwargs):
    with pytest.raises(UnsafePath) as e:
        shared_paths.read_bytes(str(path), 'the test file', limit, **kwargs)
    text = str(e.value)
    assert text.startswith(f'chainermn_torus: refusing the test file {path}: ') and \
        'nothing was read from it' in text and text.count('\n') == 0, text
    return text


def test_a_regular_file_of_mine_is_read_and_anything_else_refused(tmp_path):
    mine = tmp_path / 'mine'
    mine.write_bytes(b'{"a": 1}')
    assert shared_paths.read_json(str(mine), 'the test file', 100) == {'a': 1}
    link = tmp_path / 'link'
    link.symlink_to('/dev/zero')
    assert "a symbolic link owned by" in _refused(link) and "to '/dev/zero'" in _refused(link)
    fifo = tmp_path / 'fifo'
    os.mkfifo(str(fifo))
    assert 'it is a FIFO owned by' in _refused(fifo)  # refused at once, never waited on
    assert 'it is a directory owned by' in _refused(tmp_path)
    hard = tmp_path / 'hard'
    os.link(str(mine), str(hard))
    assert 'it has 2 hard links' in _refused(hard)
    os.remove(str(hard))
    assert 'holds 8 bytes, more than the 4 such a file may' in _refused(mine, limit=4)
    mine.chmod(0o666)
    assert 'it can be written by everyone (mode 666' in _refused(mine)
    assert shared_paths.read_bytes(str(mine), 'the test file', 100, trusted=True) == b'{"a": 1}'


def test_a_directory_link_is_refused_and_a_sticky_shared_one_allowed_where_asked(tmp_path):
    real = tmp_path / 'real'
    real.mkdir(mode=0o700)
    (tmp_path / 'via').symlink_to(str(real))
    assert package_probes.directory_problem(str(real)) is None
    assert 'a symbolic link owned by' in package_probes.directory_problem(str(tmp_path / 'via'))
    assert 'a symbolic link' in package_probes.directory_problem(str(tmp_path / 'via'),
                                                               trusted=True)
    real.chmod(0o1777)
    assert 'can be written by everyone (mode 1777' in package_probes.directory_problem(str(real))
    assert package_probes.directory_problem(str(real), shared=True) is None
    with pytest.raises(FileNotFoundError):
        package_probes.directory_problem(str(tmp_path / 'none'))


@needs_root
def test_another_users_file_is_refused_naming_them(shared_dir):
    theirs = os.path.join(shared_dir, 'theirs')
    as_other(lambda: open(theirs, 'w').write('{}'))
    assert os.stat(theirs).st_uid == OTHER_UID
    assert 'it is a file owned by nobody (uid 65534)' in _refused(theirs)


def test_a_taken_name_is_passed_over_for_another(tmp_path, monkeypatch):
    tokens = iter(['aaaaaaaaaaaa', 'aaaaaaaaaaaa', 'bbbbbbbbbbbb'])
    monkeypatch.setattr(shared_paths, 'token', lambda: next(tokens))
    fd, first = shared_paths.create_unique(str(tmp_path), 'x_')
    os.close(fd)
    fd, second = shared_paths.create_unique(str(tmp_path), 'x_')
    os.close(fd)
    assert (os.path.basename(first), os.path.basename(second)) == \
        ('x_aaaaaaaaaaaa', 'x_bbbbbbbbbbbb')
    assert stat.S_IMODE(os.stat(second).st_mode) == 0o600
    monkeypatch.setattr(shared_paths, 'token', lambda: 'aaaaaaaaaaaa')
    with pytest.raises(FileExistsError, match='16 names in a row'):
        shared_paths.create_unique(str(tmp_path), 'x_')
