"""The Python plane's receiver on loopback (no root, no fabric): a QP whose first packet was
overtaken and whose last packet never came.

The receiver counts what it can see: the overtaken first packet as data that came late, and
no loss for the missing last one, whose PSN no later packet reveals; the replay's join adds
that one from the sender's count (``tests/unit/test_replay_join.py``).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

from traffic.roce import Endpoints, FrameBuilder
from traffic.shell import agent


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _send_when_ready(ready: Path, port: int, payloads: list[bytes]) -> None:
    end = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < end:
        time.sleep(0.01)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for p in payloads:
            s.sendto(p, ("127.0.0.1", port))
            time.sleep(0.002)


def test_the_python_receiver_takes_an_overtaken_first_packet_as_data(tmp_path: Path) -> None:
    ep = Endpoints("02:00:00:00:00:01", "02:00:00:00:00:02", "127.0.0.1", "127.0.0.1", 7)
    b = FrameBuilder(ep, 1024)
    frames = [bytes(fr) for size in (3000, 3000) for fr in b.frames(size)]  # PSNs 0..5
    assert len(frames) == 6
    order = [1, 0, 2, 3, 4]  # PSN 0 overtaken by PSN 1; PSN 5, the QP's tail, never sent
    port = _free_udp_port()
    ready, out = tmp_path / "ready", tmp_path / "recv.json"
    sender = threading.Thread(target=_send_when_ready,
                              args=(ready, port, [frames[i][42:] for i in order]))
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    sender.start()
    try:
        got = agent.receive(str(out), str(ready), port=port, idle_timeout=0.3, timeout=15)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        sender.join()
    assert got["stop_reason"] == "idle" and os.path.exists(out)
    row = got["flows"]["127.0.0.1/7"]
    assert row["bytes"] == 6000 - 952 and row["packets"] == 5  # all but the 952-byte tail
    assert (row["lost"], row["reordered"], row["duplicates"]) == (0, 1, 0)
    assert (row["first_psn"], row["next_psn"]) == (0, 5)
    assert [m["complete"] for m in got["messages"]] == [True, False]
    assert got["receiver_drops"] == 0
