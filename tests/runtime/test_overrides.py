"""The launcher's one seam (runtime.overrides): both factories read the Overrides in force,
and installing a launcher's keeps what was set before it (the command line's
--communicator)."""
from chainermn_torus import _registry
from chainermn_torus.runtime import overrides


class Launcher(overrides.Overrides):
    def optimizer_options(self, actual_optimizer, options):
        return dict(options, fused='auto')


def test_installing_keeps_the_communicator_fields_and_both_factories_read_it():
    try:
        _registry.force_communicator('rsap', grid='1x2')
        _registry.add_default('tune', 'off')
        launcher = overrides.install(Launcher())
        assert overrides.current() is launcher
        assert launcher.forced == ('rsap', {'grid': '1x2'})
        # the communicator factory's question, asked of the installed object
        assert launcher.choose('naive', {}, _registry.names()) == ('rsap', {'grid': '1x2'})
        assert launcher.with_defaults({'tune', 'grid'}, {}) == {'tune': 'off'}
        assert launcher.with_defaults({'grid'}, {}) == {}
        # the optimizer factory's, answered by the subclass
        assert launcher.optimizer_options(None, {'fused': False}) == {'fused': 'auto'}
        _registry.force_communicator(None)
        assert launcher.choose('naive', {}, _registry.names()) == ('naive', {})
    finally:
        _registry.force_communicator(None)
        _registry.set_defaults()
        overrides.install(None)
    assert type(overrides.current()) is overrides.Overrides
    assert overrides.current().optimizer_options(None, {'fused': False}) == {'fused': False}


def test_the_optimizer_factory_has_no_seam_of_its_own():
    from chainermn_torus.optimizers import factory
    assert not hasattr(factory, 'set_overrides') and not hasattr(_registry, 'OVERRIDES')
