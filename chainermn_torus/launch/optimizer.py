"""The launcher's answers to the optimizer factory (the policy's ``optimizer_options``,
``optimizer_made``): what the user gave the launcher wins over the script's own arguments;
the launcher's defaults (fused auto) only fill in what the script left out, and its fused
choice never fails (an optimizer without a kernel is reported)."""
from chainermn_torus.launch import options as _options
from chainermn_torus.launch.lines import optimizer_line, say

__all__ = ['options_for', 'made']


def options_for(launch, actual_optimizer, options):
    merged = dict({'fused': launch.get('fused')}, **options)
    for key in _options.keys('optimizer'):
        if key in launch.given:
            merged[key] = launch.get(key)
    merged['fused'] = _fused_choice(actual_optimizer, merged['fused'])
    return merged


def made(launch, name, communicator, options, fused_applied):
    from chainermn_torus.optimizers import fusable_names  # loaded with the optimizer
    say(optimizer_line(name, options, fused_applied, launch.get('fused'), fusable_names(),
                       _options.keys('optimizer')), communicator.rank)


def _fused_choice(actual_optimizer, requested):
    if requested is False or requested is None:
        return False
    from chainermn_torus.optimizers import fusable_names
    return 'auto' if type(actual_optimizer).__name__ in fusable_names() else False
