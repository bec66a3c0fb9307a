"""Host shells start whatever signals fly: a Ctrl-C sent to the terminal's process group
while shells are being forked must neither kill one nor leave the bring-up waiting on it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from testbed.shell.machine import fabric_lock

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Starts 17 shells as the Lab does (8 threads) while SIGINT floods its own process group,
#: which a terminal's Ctrl-C reaches; the program itself takes the signal (a Lab holds it).
_FLOOD = """
import os, signal, threading, time
from concurrent.futures import ThreadPoolExecutor
from testbed.shell.hostshell import LabHost

signal.signal(signal.SIGINT, lambda *_: None)
hosts = [LabHost("hsr0", inNamespace=True)]  # Mininet's one-time checks run commands too
done = threading.Event()

def flood():
    while not done.is_set():
        os.killpg(0, signal.SIGINT)
        time.sleep(0.0005)

threading.Thread(target=flood, daemon=True).start()
try:
    with ThreadPoolExecutor(8) as pool:
        hosts += pool.map(lambda i: LabHost(f"hsr{i}", inNamespace=True), range(1, 17))
finally:
    done.set()
    print("alive", sum(h.shell.poll() is None for h in hosts), "of", len(hosts), flush=True)
    for h in hosts:
        h.terminate()
"""


def test_shells_start_and_live_through_a_flood_of_ctrl_c() -> None:
    lock = fabric_lock(lambda _msg: None)
    try:
        proc = subprocess.run([sys.executable, "-c", _FLOOD], cwd=REPO, start_new_session=True,
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the shells' start hung: {exc.stdout!r} {exc.stderr!r}")
    finally:
        subprocess.run(["pkill", "-KILL", "-f", "mininet:hsr"], check=False)
        lock.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "alive 17 of 17" in proc.stdout, proc.stdout + proc.stderr[-3000:]
