"""``chainermn-torus config | names | variants``: the package's tables, printed."""
import argparse

from chainermn_torus import _registry, settings_table
from chainermn_torus.algorithms.variants import VARIANTS

__all__ = ['config_main', 'names_main', 'variants_main', 'variants_table']


def _no_options(prog, description, argv):
    argparse.ArgumentParser(prog='chainermn-torus ' + prog, description=description) \
        .parse_args(argv)


def config_main(argv):
    _no_options('config', 'Every CHAINERMN_TORUS_* variable: default and meaning.', argv)
    print(settings_table.table())
    return 0


def names_main(argv):
    _no_options('names', 'The communicator names create_communicator takes: ours, then '
                "ChainerMN's.", argv)
    print('\n'.join(_registry.valid_names()))
    return 0


def variants_main(argv):
    _no_options('variants', 'The algorithm variants (algorithms.variants): communicator and '
                'options, model, benchmark and test rows.', argv)
    print(variants_table())
    return 0


def variants_table():
    lines = ['{:<26} {:<38} {:<21} {:<8} {:<14} {}'.format(
        'variant', 'communicator(options)', 'model (algorithms)', 'bench', 'tested on P',
        'what')]
    for v in VARIANTS.values():
        model = '-' if v.algorithm is None else type(v.algorithm).__name__ + (
            ', planned' if v.plan else '')
        lines.append('{:<26} {:<38} {:<21} {:<8} {:<14} {}'.format(
            v.name, v.describe(), model, v.bench or '-',
            ','.join(map(str, v.test_ranks)) or '-', v.note))
    return '\n'.join(lines)
