"""Moved to ``controllers.shell.run`` (the shell has its own folder); kept for one release.
Importing this name gives that very module, so attributes and patches are shared."""

import sys

from controllers.shell import run as _moved

sys.modules[__name__] = _moved
