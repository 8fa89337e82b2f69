"""Turns setuptools' bare "invalid command 'bdist_wheel'" into what to do instead.

The package itself is declared in pyproject.toml; this file adds nothing to it. setuptools
before 70.1 builds wheels through the separate `wheel` package. An offline install
(`pip install --no-build-isolation --no-index`) can only use the `wheel` the interpreter
already has: Debian's python3 has it (python3-wheel), a pyenv or python.org build usually
does not, and then has no `msgpack` either. When `bdist_wheel` is missing, this file puts a
command in its place that stops the build with the two installs that work.
"""

import sys

import setuptools
from setuptools import Command, setup


def _have_bdist_wheel() -> bool:
    try:
        import wheel.bdist_wheel  # noqa: F401  (setuptools < 70.1)
        return True
    except ImportError:
        pass
    try:
        import setuptools.command.bdist_wheel  # noqa: F401  (setuptools >= 70.1)
        return True
    except ImportError:
        return False


def _have_msgpack() -> bool:
    try:
        import msgpack  # noqa: F401
        return True
    except ImportError:
        return False


ADVICE = """
ratelimiter-client: cannot build with {python} (Python {version}):
its setuptools {setuptools} builds wheels with the 'wheel' package, which this
interpreter does not have{msgpack}; pip may not fetch it (--no-build-isolation,
--no-index). Either:
  - use Debian's python3, whose python3-setuptools, python3-wheel and python3-msgpack
    packages are all an offline install needs:
        /usr/bin/python3 -m venv --system-site-packages venv
        venv/bin/pip install --no-build-isolation --no-index ./clients/python
  - or, with access to PyPI, let pip fetch what is missing:
        python3 -m venv venv
        venv/bin/pip install ./clients/python
"""


class MissingBdistWheel(Command):
    """Stands in for bdist_wheel when no wheel builder is installed: says what to do."""

    description = "explain why no wheel can be built with this interpreter"
    user_options = []

    def initialize_options(self):
        pass

    def finalize_options(self):
        raise SystemExit(ADVICE.format(
            python=sys.executable, version=sys.version.split()[0],
            setuptools=setuptools.__version__,
            msgpack="" if _have_msgpack() else " (nor msgpack,\nthe client's one dependency)"))

    def run(self):
        pass


setup(cmdclass={} if _have_bdist_wheel() else {"bdist_wheel": MissingBdistWheel})
