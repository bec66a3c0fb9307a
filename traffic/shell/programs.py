"""The programs the lab starts inside hosts, named once.

Whoever starts one builds its command line from these names, and ``astral-lab clean``
(``testbed.shell.cleanup.traffic_program``) recognises by the same names the ones a killed
run left running: a renamed program cannot silently escape the sweep.
"""

from __future__ import annotations

import sys

#: the UDP probe streams (``testbed.shell.probe``, the hot-receiver fault)
PROBE_MODULE = "astral_lab.probe_cli"
#: the replay's Python sender and receiver agents (``traffic.shell.replay``)
AGENT_MODULE = "astral_lab.agent_cli"
#: the compiled sender, receiver and host agent (``traffic.shell.pktio``, ``agents``)
PKTIO = "astral-pktio"
#: iperf3 bulk flows (``traffic.shell.iperf``)
IPERF = "iperf3"

#: run as ``python -m MODULE``, now and by earlier versions (whose orphans may still run)
MODULES = (PROBE_MODULE, AGENT_MODULE, "traffic.shell.agent", "traffic.agent",
           "testbed.shell.probe", "testbed.probe")
#: the lab's own executables, known by their file name
BINARIES = (PKTIO,)
#: general tools the lab also runs in hosts: a stranger may run them too, so one counts as
#: the lab's only inside a namespace with the lab's interface names
TOOLS = (IPERF,)


def python_module(module: str) -> list[str]:
    """The command line that runs ``module`` with this interpreter, as the sweep expects."""
    return [sys.executable, "-m", module]
