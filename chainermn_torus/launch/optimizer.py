"""The launcher's options for every multi-node optimizer a script makes, through the one
seam both factories read (``runtime.overrides.Overrides``): what the user gave the launcher wins over the
script's own arguments; the launcher's defaults (fused auto) only fill in what the script
left out, and its fused choice never fails (an optimizer without a kernel is reported)."""
from chainermn_torus.launch import options as _options
from chainermn_torus.launch.report import optimizer_line, say
from chainermn_torus.runtime import overrides

__all__ = ['LauncherOverrides']


class LauncherOverrides(overrides.Overrides):
    """The overrides of one launch: the communicator fields are set through ``_registry``'s
    functions; the optimizer's answers are below."""

    def __init__(self, launch):
        super(LauncherOverrides, self).__init__()
        self.launch = launch

    def optimizer_options(self, actual_optimizer, options):
        launch = self.launch
        merged = dict({'fused': launch.get('fused')}, **options)
        for key in _options.keys('optimizer'):
            if key in launch.given:
                merged[key] = launch.get(key)
        merged['fused'] = _fused_choice(actual_optimizer, merged['fused'])
        return merged

    def optimizer_made(self, name, communicator, options, fused_applied):
        from chainermn_torus.optimizers import fusable_names  # loaded with the optimizer
        say(optimizer_line(name, options, fused_applied, self.launch.get('fused'),
                           fusable_names(), _options.keys('optimizer')),
            communicator.rank)

    def first_update(self):
        self.launch.check_update()


def _fused_choice(actual_optimizer, requested):
    if requested is False or requested is None:
        return False
    from chainermn_torus.optimizers import fusable_names
    return 'auto' if type(actual_optimizer).__name__ in fusable_names() else False
