"""chainermn-torus: 2D-torus gradient communicators and CPU tooling for ChainerMN."""
from setuptools import find_packages, setup

setup(
    name='chainermn-torus',
    version='0.1.0',
    description='2D-torus all-reduce communicators (RSAA, RSAP) for ChainerMN on CPU clusters',
    long_description=open('README.md').read() if __import__('os').path.exists('README.md') else '',
    long_description_content_type='text/markdown',
    packages=find_packages(include=['chainermn_torus', 'chainermn_torus.*']),
    python_requires='>=3.8',
    # chainer 7.8.1 is installed by scripts/setup.sh (it needs setuptools<70 and no build
    # isolation), so it is declared here without forcing pip to build it again.
    install_requires=['chainer==7.8.1', 'numpy<2', 'mpi4py>=3.1'],
    extras_require={
        'test': ['pytest'],
        'fast': ['numba', 'threadpoolctl', 'psutil'],
        'plot': ['matplotlib'],
    },
    entry_points={'console_scripts': ['chainermn-torus=chainermn_torus.tools.cli:main']},
)
