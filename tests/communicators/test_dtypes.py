"""The dtypes gradients travel in: names and dtypes taken, bad values and a missing
ml_dtypes refused in one line, which of them are summed by the kernels and scaled first."""
import numpy
import pytest

from chainermn_torus.communicators import _dtypes
from chainermn_torus.errors import ConfigError, Unsupported
from conftest import run_mpi, worker


def test_bfloat16_is_taken_by_name_and_by_ml_dtypes_dtype():
    ml_dtypes = pytest.importorskip('ml_dtypes', reason='make setup installs ml_dtypes')
    assert _dtypes.checked('bfloat16') == numpy.dtype(ml_dtypes.bfloat16)
    assert _dtypes.checked(ml_dtypes.bfloat16).name == 'bfloat16'
    assert _dtypes.checked(numpy.float16) == numpy.float16
    assert _dtypes.checked(None) is None
    assert [_dtypes.is_half(d) for d in ('bfloat16', numpy.float16, numpy.float32, None)] == \
        [True, True, False, False]
    assert _dtypes.scaled_first('bfloat16') and not _dtypes.scaled_first(numpy.float64)


@pytest.mark.parametrize('bad', ['bfloat8', numpy.int16, 'float8', object()])
def test_a_bad_dtype_is_refused_naming_what_is_allowed(bad):
    with pytest.raises(ConfigError) as e:
        _dtypes.checked(bad)
    assert "'bfloat16' (or ml_dtypes.bfloat16)" in str(e.value) and repr(bad) in str(e.value)


def test_without_ml_dtypes_bfloat16_is_refused_naming_the_install(monkeypatch):
    monkeypatch.setattr(_dtypes, '_ml_dtypes', lambda: None)
    with pytest.raises(Unsupported) as e:
        _dtypes.checked('bfloat16')
    assert 'pip install "ml_dtypes<0.6"' in str(e.value) and '\n' not in str(e.value)
    assert _dtypes.checked(numpy.float16) == numpy.float16  # float16 needs nothing more


@pytest.mark.one_mpi  # a refusal said once: tests/test_refusals.py under each MPI
def test_the_launcher_takes_one_wire_dtype_not_two():
    proc = run_mpi(1, ['-m', 'chainermn_torus.run', '--fp16-allreduce', '--allreduce-dtype',
                       'bfloat16', worker('refusal_script.py')])
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode != 0 and len(lines) == 1, lines
    assert '--fp16-allreduce sends float16, and --allreduce-dtype asks for bfloat16' in lines[0]
