"""Moved to ``traffic.shell.replay`` (the shell has its own folder); kept for one release.
Importing this name gives that very module, so attributes and patches are shared."""

import sys

from traffic.shell import replay as _moved

sys.modules[__name__] = _moved
