"""The lab's version: ``astral-lab --version`` and the cluster prechecks both read it here.

It sits below the ``astral_lab`` package (the CLI) so that ``testbed`` can compare this
machine's version with a server's without importing the package at the top, which imports
``testbed``. Keep it equal to ``version`` in pyproject.toml.
"""

__version__ = "0.1.0"
