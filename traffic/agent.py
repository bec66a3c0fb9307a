"""Moved to ``traffic.shell.agent`` (the shell has its own folder); kept for one release.
Importing this name gives that very module, so attributes and patches are shared."""

import sys

from traffic.shell import agent as _moved

sys.modules[__name__] = _moved
