"""chainermn-torus: 2D-torus gradient communicators and CPU tooling for ChainerMN."""
from setuptools import find_namespace_packages, setup

ONEDNN = 'onednn-cpu-gomp==2023.2.0; platform_machine == "x86_64"'

setup(
    name='chainermn-torus',
    version='0.1.0',
    description='2D-torus all-reduce communicators (RSAA, RSAP) for ChainerMN on CPU clusters',
    long_description=open('README.md').read() if __import__('os').path.exists('README.md') else '',
    long_description_content_type='text/markdown',
    # Namespace packages too: compute/kernels and compute/onednn have no __init__.py, and a
    # wheel built with find_packages left them out (its import failed at the first layer).
    packages=find_namespace_packages(include=['chainermn_torus', 'chainermn_torus.*'],
                                     exclude=['*.__pycache__']),
    python_requires='>=3.8',
    # What every rank imports. chainer 7.8.1 is installed by scripts/setup.sh (it needs
    # setuptools<70 and no build isolation), so it is declared here without forcing pip to
    # build it again. psutil and threadpoolctl set each rank's thread budget (runtime.cpu.threads).
    # mpi4py binds to the site's MPI; no MPI library is required from the package index.
    install_requires=['chainer==7.8.1', 'numpy<2', 'mpi4py>=3.1', 'psutil', 'threadpoolctl'],
    extras_require={
        # The kernels: fused updates and flush-to-zero need it; the communicators' float16
        # and shared-memory paths fall back to numpy without it (runtime.cpu.jit), slower.
        'numba': ['numba'],
        # A local MPI where the site gives none (a laptop, CI): the mpich wheel's mpiexec.
        'mpich': ['mpich'],
        'imagenet': ['pillow'],            # JPEG decoding in the ImageNet example
        'plot': ['matplotlib'],            # timelines and benchmark plots
        # oneDNN 3.2 for Chainer's heavy layers (compute/): the x86-64 build with GNU
        # OpenMP. Not the wheel named `onednn` (2026.1): that is the SYCL build, which needs
        # Intel's compiler runtimes. Elsewhere (aarch64) a site's libdnnl.so.3, or numpy.
        'onednn': [ONEDNN],
        # The whole CPU stack of a cluster install, in one word (docs/cluster.md).
        'cpu': [ONEDNN, 'numba', 'pillow', 'matplotlib'],
        # import-linter: the layers (.importlinter); ruff: the style check (ruff.toml);
        # mypy: the public API's type hints (mypy.ini)
        'test': ['pytest', 'import-linter', 'ruff==0.17.6', 'mypy==1.13.0'],
        # numpy's bfloat16 dtype: bfloat16 gradient communication (0.6 needs numpy 2)
        'bf16': ['ml_dtypes>=0.5,<0.6'],
    },
    entry_points={'console_scripts': ['chainermn-torus=chainermn_torus.tools.cli:main']},
)
