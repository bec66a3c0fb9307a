"""The diagnosis agent's active probe: a short ping from inside a host's network namespace.

The one tool of ``ops.agent.Tools`` that touches the machine; it returns ping's own summary
and the agent parses it.
"""

from __future__ import annotations

import subprocess


def ping(pid: int, ip: str, count: int) -> str:
    """``count`` pings 20 ms apart from the namespace of process ``pid`` to ``ip``."""
    proc = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "ping", "-q", "-n",
                           "-c", str(int(count)), "-i", "0.02", "-W", "1", str(ip)],
                          capture_output=True, text=True, timeout=30, check=False)
    return proc.stdout
