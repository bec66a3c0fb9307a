"""``mn --custom testbed/mntopo.py`` keeps working: the topos moved to
``testbed/shell/mntopo.py`` (the root shell's folder); kept for one release."""

import inspect
import os
import sys

if __name__ != "testbed.mntopo":  # exec'd by `mn --custom`: the repo's packages first
    _here = inspect.currentframe().f_code.co_filename  # type: ignore[union-attr]
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(_here))))

from testbed.shell.mntopo import topos  # noqa: E402,F401

if __name__ == "testbed.mntopo":
    from testbed.shell import mntopo as _moved

    sys.modules[__name__] = _moved
