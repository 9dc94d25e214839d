"""The launcher's lines on rank 0, all starting ``chainermn_torus.run:``
(``runtime.report`` prints them)."""
from chainermn_torus.runtime import report

__all__ = ['PREFIX', 'say', 'describe_iterator', 'optimizer_line']

PREFIX = 'chainermn_torus.run: '

# How the report names each optimizer option that is on, in this order (a new option is
# named by its key, after these, until a phrase is added here).
_PHRASES = {'flush_denormals': 'flush-to-zero', 'double_buffering': 'double buffering',
            'overlap': 'overlap during backward', 'check_finite': 'finite check',
            'watchdog': 'watchdog {:g} s', 'check_replicas': 'replica check every {} steps',
            'type_check': "Chainer's type checks: {}"}


def say(line, rank=None):
    """One report line on rank 0 (rank: the caller's, else MPI_COMM_WORLD's)."""
    report.say(line, rank, prefix=PREFIX)


def describe_iterator(it):
    name = type(it).__name__
    n = getattr(it, 'n_processes', None)
    return '{}({}batch_size={})'.format(name, '' if n is None else f'n_processes={n}, ',
                                        it.batch_size)


def optimizer_line(name, options, fused_applied, fused_setting, fusable, option_keys):
    """The line for a multi-node optimizer the script made: the update it got and every
    option of ``option_keys`` that is on."""
    if fused_applied:
        parts = [f'fused {name} kernel']  # the name the script used
    elif name not in fusable and fused_setting is not False:
        parts = ["{}: no fused kernel (fused: {}), Chainer's update".format(
            name, ', '.join(fusable))]
    else:
        parts = ["{}: Chainer's update ({})".format(
            name, '--no-fused' if fused_setting is False else "the script's choice")]
    said = list(_PHRASES) + [k for k in option_keys if k not in _PHRASES and k != 'fused']
    for key in said:
        v = options.get(key)
        if v:
            parts.append(_PHRASES.get(key, key).format(v))
    return 'create_multi_node_optimizer({}) -> {}'.format(name, ', '.join(parts))
