"""A starting host shell that dies before its prompt is an error, not a wait forever."""

from __future__ import annotations

import os
import pty
import select
import subprocess

import pytest
from mininet.util import getincrementaldecoder

from testbed.shell.hostshell import LabHost, ShellDied


def _starting_host(shell: subprocess.Popen[bytes]) -> LabHost:
    """A LabHost in the state Mininet's ``startShell`` has it while waiting for the prompt:
    its terminal open at both ends here, and ``shell`` the process on it."""
    host = LabHost.__new__(LabHost)  # the terminal and process by hand: no mnexec, no root
    host.name, host.readbuf, host._starting = "s0g0", "", True
    host.decoder = getincrementaldecoder()
    master, host.slave = pty.openpty()
    os.set_blocking(master, False)  # a read that would wait fails the test instead
    host.stdin = host.stdout = os.fdopen(master, "r")
    host.pollOut = select.poll()
    host.pollOut.register(host.stdout)
    host.shell = shell
    return host


def test_a_shell_gone_before_its_prompt_raises_and_closes_its_terminal() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    host = _starting_host(proc)
    slave = host.slave
    with pytest.raises(ShellDied, match=r"s0g0: its shell exited \(status 0\)"):
        host.read(1024)
    assert host.stdin.closed and host.shell is None
    with pytest.raises(OSError):
        os.fstat(slave)


def test_a_starting_shell_that_speaks_is_read_as_mininet_reads_it() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        host = _starting_host(proc)
        os.write(host.slave, b"ready\x7f")
        assert host.read(1024).endswith("\x7f")
    finally:
        proc.kill()
        proc.wait()
