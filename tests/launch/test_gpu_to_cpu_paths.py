"""`--gpu-to-cpu-paths` (CHAINERMN_TORUS_GPU_TO_CPU_PATHS) under the rule for shared
directories (issue 72, item 5): a directory another user owns or may write is refused in one
line unless trusted, and `--gpu-calls` reads each module only where it is a regular file of
bounded size, passing over a 2 GiB sparse `json.py`, a FIFO and text that is not Python with
a line each, never a traceback."""
import os

import pytest

from chainermn_torus import settings_table
from chainermn_torus.errors import UnsafePath
from chainermn_torus.launch import gpu_to_cpu
from conftest import run_cli  # noqa: F401
from tests.other_user import OTHER_UID, as_other, needs_root, shared_dir  # noqa: F401


def _script(folder, *imports):
    script = folder / 'train.py'
    script.write_text(''.join(f'import {m}\n' for m in imports) +
                      'import chainer\nchainer.get_device("@cupy:0")\n')
    return str(script)


@needs_root
def test_another_users_directory_is_refused_in_one_line_unless_trusted(shared_dir):
    theirs = os.path.join(shared_dir, 'helpers')
    as_other(os.mkdir, theirs, 0o777)
    as_other(os.chmod, theirs, 0o777)
    assert os.stat(theirs).st_uid == OTHER_UID
    with pytest.raises(UnsafePath) as e:
        gpu_to_cpu.paths(theirs, '--gpu-to-cpu-paths')
    line = str(e.value)
    assert line.startswith('chainermn_torus: refusing the directory of '
                           f'--gpu-to-cpu-paths {theirs}: '
                           'it is a directory owned by nobody (uid 65534)'), line
    assert '--trust-gpu-to-cpu-paths' in line and '\n' not in line
    assert gpu_to_cpu.paths(theirs, '--gpu-to-cpu-paths', trusted=True) == (theirs,)


@needs_root
def test_gpu_calls_with_another_users_directory_ends_in_one_line(shared_dir, tmp_path,
                                                                 monkeypatch, capsys):
    from chainermn_torus import run
    theirs = os.path.join(shared_dir, 'helpers')
    as_other(os.mkdir, theirs, 0o755)
    monkeypatch.setenv('CHAINERMN_TORUS_GPU_TO_CPU_PATHS', theirs)
    with pytest.raises(SystemExit) as e:
        run.main(['--gpu-calls', _script(tmp_path, 'json')])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 1 and '\n' not in err and 'Traceback' not in err, err
    assert (f'refusing the directory of CHAINERMN_TORUS_GPU_TO_CPU_PATHS {theirs}: it is a '
            'directory owned by nobody (uid 65534)') in err, err
    monkeypatch.setenv('CHAINERMN_TORUS_TRUST_GPU_TO_CPU_PATHS', '1')
    run.main(['--gpu-calls', _script(tmp_path, 'json')])
    assert '1 GPU call(s)' in capsys.readouterr().out


def test_a_directory_others_can_write_on_the_way_is_refused(tmp_path):
    open_dir = tmp_path / 'project'
    (open_dir / 'helpers').mkdir(parents=True, mode=0o700)
    open_dir.chmod(0o777)
    with pytest.raises(UnsafePath, match=f'its component {open_dir} can be written by everyone'):
        gpu_to_cpu.paths(str(open_dir / 'helpers'))


def test_gpu_calls_pass_over_a_huge_a_special_and_a_broken_module(tmp_path):
    helpers = tmp_path / 'helpers'
    helpers.mkdir(mode=0o700)
    with open(str(helpers / 'json.py'), 'wb') as f:     # 2 GiB, sparse: nothing on disk
        f.truncate(2 << 30)
    os.mkfifo(str(helpers / 'pipes.py'))
    (helpers / 'broken.py').write_text('def (:\n')
    (helpers / 'fine.py').write_text('import cupy\n')
    job = tmp_path / 'job'
    job.mkdir()
    lines = gpu_to_cpu.listing(_script(job, 'json', 'pipes', 'broken', 'fine'),
                               gpu_to_cpu.paths(str(helpers)))
    text = '\n'.join(lines)
    assert "train.py:6  '@cupy:0'  -> '@numpy'" in text, text   # the script is read
    assert 'fine.py:1  import cupy' in text, text          # the readable one is read
    passed = [line for line in lines if line.startswith('passed over')]
    assert len(passed) == 3, lines
    assert any('helpers/json.py: it holds 2,147,483,648 bytes, more than the {:,}'.format(
        settings_table.BOUNDS['module']) in line for line in passed), passed
    assert any('pipes.py: it is a FIFO' in line for line in passed), passed
    assert any('broken.py: not Python this interpreter reads' in line for line in passed), passed
    assert 'Traceback' not in text
