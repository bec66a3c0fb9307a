"""Moved to ``testbed.shell.lab`` (the shell has its own folder); kept for one release.
Importing this name gives that very module, so attributes and patches are shared."""

import sys

from testbed.shell import lab as _moved

sys.modules[__name__] = _moved
