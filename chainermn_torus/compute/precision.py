"""What the convolutions and linear layers compute in: ``fp32`` (float32 throughout, the
default) or ``bf16`` (bfloat16 data into oneDNN's primitives, float32 sums out; the
parameters, their gradients, the optimizer's state and every array Chainer sees stay
float32). The setting is ``CHAINERMN_TORUS_PRECISION`` and the launcher's ``--precision``;
``compute.use`` applies it.

bfloat16 pays only where the CPU multiplies it in hardware: AVX512-BF16 (AMD Zen 4 and 5,
Intel Cooper Lake), AMX (Intel Xeon since Sapphire Rapids) or Arm's BF16 (Neoverse V1/V2).
Elsewhere oneDNN would emulate it, slower than float32, so ``bf16`` is refused there
(``check``), naming what the CPU lacks.
"""
from chainermn_torus import settings_table
from chainermn_torus.errors import ConfigError, Unsupported

__all__ = ['NAMES', 'cpu_bf16', 'check', 'INSTRUCTIONS']

NAMES = settings_table.KINDS['precision'].names

# /proc/cpuinfo's flag -> what it is: any one is enough.
INSTRUCTIONS = {'avx512_bf16': 'AVX512-BF16', 'amx_bf16': 'AMX-BF16',
                'bf16': "Arm's BF16 (FEAT_BF16)"}


def cpu_flags(path='/proc/cpuinfo'):
    """The first processor's feature flags (x86 ``flags``, Arm ``Features``), as a set;
    empty where the file cannot be read."""
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(':')
                if key.strip() in ('flags', 'Features'):
                    return set(value.split())
    except OSError:
        pass
    return set()


def cpu_bf16(path='/proc/cpuinfo'):
    """(True, the instructions found) or (False, what the CPU lacks)."""
    flags = cpu_flags(path)
    found = [what for flag, what in INSTRUCTIONS.items() if flag in flags]
    if found:
        return True, ', '.join(found)
    return False, 'this CPU has none of {} ({} flags read from {})'.format(
        ', '.join(INSTRUCTIONS.values()), len(flags), path)


def check(precision, mode, source, path='/proc/cpuinfo'):
    """Refuse ``bf16`` where it cannot run fast: without oneDNN (``mode`` numpy) or on a CPU
    without bfloat16 instructions. ``source`` names the setting in the message."""
    if precision != 'bf16':
        return
    if mode == 'numpy':
        raise ConfigError(f'chainermn_torus: {source}=bf16 needs oneDNN, and compute is numpy '
                          '(Chainer\'s own layers compute in float32); use compute onednn '
                          'or auto, or precision fp32')
    ok, what = cpu_bf16(path)
    if not ok:
        raise Unsupported(f'chainermn_torus: {source}=bf16 refused: {what}; oneDNN would emulate '
                          'bfloat16, slower than float32: use precision fp32')
