"""The worked extensions of docs/extending.md on a real fabric: the new topology, under
the new policy.

The project is copied with ``examples/plugins/leafspine.py`` and ``roundrobin.py`` put in
place (tests/unit/test_extending.py), and the copy brings ``leafspine`` up under
``--lb roundrobin`` as a user would, then replays flows through it: the controller (a
separate process started from the copy) must know the mode, pin the posted flows, and
the traffic must arrive.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.unit.test_extending import cli, copy_with_plugins
from vocab.plan import WiringPlan

SIZE = ["--servers", "4", "--gpus-per-server", "2", "--servers-per-block", "2"]

_REPLAY = """
import json
from vocab.flows import sport_for_qp
from testbed.shell.lab import Lab
from testbed.topologies import build
from traffic.kernels import FlowSpec
from traffic.shell.replay import replay

plan = build("leafspine", servers=4, gpus=2, servers_per_block=2)
hosts = [h.name for h in plan.hosts]
flows = [FlowSpec(s, d, bytes=4 * 16_000, qp=q, sport=sport_for_qp(q), message_bytes=16_000,
                  messages=4) for s, d in zip(hosts, hosts[::-1]) if s != d for q in range(2)]
with Lab(plan, lb="roundrobin") as lab:
    res = replay(lab, flows)
    state = lab.client().lb()
print(json.dumps({"mode": state["mode"], "pins": state["pins"], "pinned": state["pinned"],
                  "flows": len(flows), "lost": res.lost_packets}))
"""


def test_the_worked_topology_comes_up_under_the_worked_policy(
        tmp_path: Path, assert_clean: Callable[[WiringPlan], None]) -> None:
    root = copy_with_plugins(tmp_path)
    out = cli(root, "topo", "leafspine", *SIZE, "-o", str(root / "plan.json"), "--no-png")
    assert out.returncode == 0, out.stderr
    plan = WiringPlan.load(str(root / "plan.json"))
    out = cli(root, "up", "leafspine", *SIZE, "--lb", "roundrobin", "--no-cli")
    assert out.returncode == 0, out.stderr
    assert "0.0% loss" in out.stdout and "lb roundrobin" in out.stdout, out.stdout
    assert_clean(plan)
    proc = subprocess.run([sys.executable, "-c", _REPLAY], cwd=root, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["mode"] == "roundrobin" and got["pins"] is True
    assert got["pinned"] == got["flows"] and got["lost"] == 0
    assert_clean(plan)
