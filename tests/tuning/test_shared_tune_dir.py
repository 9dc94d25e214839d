"""A tuning folder several users share (issue 65, item 1): a file is read only when it is
this user's regular file of bounded size; what another user put under this user's name (a
link to /dev/zero, a FIFO, a well-formed file that chooses a slow configuration) is ignored
in one line naming its owner, and the choice is kept under a name of this user's own. The
other user is uid 65534, in a forked child (tests/other_user.py)."""
import json
import os

import pytest

from chainermn_torus.tuning import memory
from tests.other_user import OTHER_UID, as_other, needs_root, shared_dir  # noqa: F401

pytestmark = needs_root

CHOICE = {'algorithm': 'rsaa', 'grid': (2, 2), 'segment_bytes': 1 << 20}


def _key():
    return memory.Key(2, 2, 'MPICH Version: 5.0.2', 'abc123', 1000)


def _forged(key):
    """What the other user writes: well formed, this user's key, a slow choice."""
    return json.dumps({'format': memory.FORMAT, 'key': dict(key),
                       'choice': {'algorithm': 'pure_allreduce', 'grid': None,
                                  'segment_bytes': 1 << 20},
                       'figures': {'chosen_ms': 1.67}, 'written': 'forged'})


def _plant(kind, where, name, text):
    path = os.path.join(where, name)
    if kind == 'link to /dev/zero':
        os.symlink('/dev/zero', path)
    elif kind == 'fifo':
        os.mkfifo(path, 0o666)
    else:
        with open(path, 'w') as f:
            f.write(text)
    return path


@pytest.mark.parametrize('kind', ['link to /dev/zero', 'fifo', 'forged choice'])
def test_what_another_user_put_under_my_name_is_ignored_and_mine_kept_elsewhere(
        shared_dir, kind):
    key = _key()
    planted = as_other(_plant, kind, shared_dir, key.file_name(), _forged(key))
    assert os.lstat(planted).st_uid == OTHER_UID
    found = memory.load(key, 4, shared_dir)  # no hang (FIFO), nothing read (/dev/zero)
    assert found.choice is None and found.message.count('\n') == 0, found
    assert f'refusing the tune file {planted}' in found.message and \
        'owned by nobody (uid 65534)' in found.message and 'forged' not in found.message, found
    # The sticky folder keeps the other user's name theirs: the choice goes beside it.
    saved = memory.save(key, CHOICE, {'chosen_ms': 2.5}, shared_dir)
    assert saved != planted and os.path.basename(saved).startswith(
        key.file_name()[:-len('.json')] + '.') and os.stat(saved).st_uid == os.getuid()
    found = memory.load(key, 4, shared_dir)
    assert found.choice == CHOICE and found.path == saved and found.figures == \
        {'chosen_ms': 2.5}, found
    assert 'owned by nobody' in found.message  # still said: it is still there


def test_two_users_share_a_folder_each_with_their_own_choice(shared_dir):
    key = _key()
    mine = memory.save(key, CHOICE, {'chosen_ms': 2.5}, shared_dir)
    theirs_choice = {'algorithm': 'pure_allreduce', 'grid': None, 'segment_bytes': 0}

    def other_job():
        saved = memory.save(key, theirs_choice, {'chosen_ms': 9.0}, shared_dir)
        found = memory.load(key, 4, shared_dir)
        return saved, found.choice, found.message
    saved, got, message = as_other(other_job)
    assert saved != mine and got == dict(theirs_choice) and message is None
    assert os.stat(saved).st_uid == OTHER_UID
    found = memory.load(key, 4, shared_dir)
    assert found.choice == CHOICE and found.path == mine and found.message is None


def test_a_file_of_mine_too_large_or_linked_to_my_private_json_is_not_read(shared_dir,
                                                                          tmp_path):
    key = _key()
    private = tmp_path / 'private.json'
    private.write_text(json.dumps({'format': memory.FORMAT, 'secret': 'do-not-echo'}))
    os.symlink(str(private), os.path.join(shared_dir, key.file_name()))
    found = memory.load(key, 4, shared_dir)
    assert found.choice is None and 'symbolic link' in found.message and \
        'do-not-echo' not in found.message and 'secret' not in found.message, found
    os.remove(os.path.join(shared_dir, key.file_name()))
    with open(os.path.join(shared_dir, key.file_name()), 'w') as f:
        f.write(' ' * (65 << 10))
    found = memory.load(key, 4, shared_dir)
    assert found.choice is None and 'holds 66,560 bytes, more than the 65,536' in \
        found.message, found


def _flood(where, stem, count):
    """Names of this user's kept choices (``<stem>.<12 hex>.json``), planted by another."""
    for i in range(count):
        with open(os.path.join(where, f'{stem}.{i:012x}.json'), 'w') as f:
            f.write('{}')
    return count


def test_planted_names_are_passed_over_unread_and_said_once_with_three(shared_dir):
    key = _key()
    stem = key.file_name()[:-len('.json')]
    assert as_other(_flood, shared_dir, stem, 100) == 100
    found = memory.load(key, 4, shared_dir)
    assert found.choice is None and '\n' not in found.message
    assert found.message == (
        f"100 file(s) in {shared_dir} named as this user's kept choices are not this user's "
        "regular "
        f"files and were passed over unread ({stem}.000000000000.json, {stem}.000000000001.json, "
        f"{stem}.000000000002.json, ...)"), found.message
    saved = memory.save(key, CHOICE, {'chosen_ms': 2.5}, shared_dir)   # the own name: free
    found = memory.load(key, 4, shared_dir)
    assert found.choice == CHOICE and found.path == saved and found.message.startswith('100 ')


def test_a_flood_past_the_listing_bound_leaves_only_the_own_name_read(shared_dir):
    key = _key()
    stem = key.file_name()[:-len('.json')]
    bound = memory.settings_table.BOUNDS['listing_entries']
    as_other(_flood, shared_dir, stem, bound + 1000)
    saved = memory.save(key, CHOICE, {'chosen_ms': 2.5}, shared_dir)
    found = memory.load(key, 4, shared_dir)
    assert found.choice == CHOICE and found.path == saved
    assert '\n' not in found.message and len(found.message) < 1000, len(found.message)
    passed = int(found.message.split(' ', 1)[0].replace(',', ''))
    assert 0 < passed <= bound, found.message        # no more than the bound was looked at
    assert f'holds more entries than the {bound:,} (or 0.25 s) a job reads: only this user\'s ' \
           f'own name {key.file_name()} was looked at beyond them' in \
        found.message, found.message
