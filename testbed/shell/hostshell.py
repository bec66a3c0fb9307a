"""Mininet host shells that a Ctrl-C or a dying shell cannot leave the bring-up waiting on.

Mininet starts a host's shell as ``mnexec -cd ... bash`` on a pseudo-terminal, then reads
from the terminal until the shell's first prompt. Two gaps there matter to a lab that starts
many shells at once and must always stop cleanly:

* ``mnexec -d`` leaves our process group only once it runs, so a Ctrl-C (which a terminal
  sends to the whole group) in the moment after the fork kills the shell before it has a
  session of its own;
* Mininet keeps the terminal's other end open itself, so a shell that died before its prompt
  is never seen to end: the read waits forever, and so does the bring-up, which holds the
  stop signals while shells start.

``LabHost`` closes both. The new session is made between fork and exec (where the child
still has our caught handlers, so a signal there cannot kill it) instead of by ``mnexec -d``,
and while the shell starts, each read first waits for output or for the shell's end.
"""

from __future__ import annotations

import os
import select
from typing import Any

from mininet.node import Host

#: How often a starting shell that printed nothing is checked for having exited.
_POLL_MS = 200


class ShellDied(OSError):
    """A host shell exited before its first prompt."""


class LabHost(Host):
    """Mininet's ``Host`` with a start that cannot hang (module docstring)."""

    _starting = False

    def startShell(self, mnopts: str | None = None) -> None:  # noqa: N802  (Mininet's name)
        """Mininet's start, minus ``mnexec -d``: the session is made at the fork instead."""
        self._starting = True
        try:
            super().startShell("-c" if mnopts is None else mnopts)
        finally:
            self._starting = False

    def _popen(self, cmd: list[str], **params: Any) -> Any:
        if self._starting:  # the shell itself; later ``popen`` calls are Mininet's own
            params["start_new_session"] = True
        return super()._popen(cmd, **params)

    def read(self, size: int = 1024) -> str:
        """Mininet's blocking read; while starting, one that gives up if the shell is gone."""
        if self._starting:
            self._wait_output()
        return super().read(size)

    def _wait_output(self) -> None:
        readable = select.poll()  # not Mininet's ``pollOut``: it also wakes for "writable"
        readable.register(self.stdout.fileno(), select.POLLIN | select.POLLPRI)
        while not self.readbuf and not readable.poll(_POLL_MS):
            status = self.shell.poll()
            if status is not None:
                self._close_terminal()
                raise ShellDied(f"{self.name}: its shell exited (status {status}) "
                                "before its first prompt")

    def _close_terminal(self) -> None:
        """Both ends of the dead shell's terminal: Mininet closes them only in ``cleanup``,
        which is never called for a host that did not start."""
        self.stdin.close()
        os.close(self.slave)
        self.shell = None
