"""Check a running fabric's cabling against its wiring plan with real frames.

``check_wiring(plan)`` runs what ``testbed.wiring`` builds: a learning rule on every
switch, one probe frame out of each end of every switch-to-switch link (packet-outs in
one bundle per switch), a pause for the frames to cross, then each switch's learned
entries read back and every rule of the check deleted, also when something failed.
The answer is the probes that arrived elsewhere than planned, or nowhere.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from testbed import daemons, wiring
from testbed.shell import cleanup
from testbed.shell.daemons import locate_bridges
from vocab.plan import WiringPlan

Run = Callable[..., subprocess.CompletedProcess[str]]


def check_wiring(plan: WiringPlan, run: Run = cleanup.run, settle: float = 0.5,
                 repeat: int = 2) -> list[wiring.Finding]:
    """The links of ``plan`` whose frames arrive at another switch port than planned
    (``Finding.seen``) or nowhere (None); empty when the cabling is as planned.
    ``settle``: seconds the frames get to arrive; ``repeat``: copies of each frame."""
    sent = wiring.probes(plan)
    bridges = [s.name for s in plan.switches]
    by_switch: dict[str, list[wiring.Probe]] = {}
    for p in sent:
        by_switch.setdefault(p.switch, []).append(p)
    # each bridge's commands go to the switch daemon that has it (testbed.shell.daemons)
    extra = daemons.running()
    home = locate_bridges(extra) if extra else {}

    def at(br: str, argv: list[str]) -> list[str]:
        return home.get(br, daemons.ROOT).ovs(argv)

    try:
        for br in bridges:
            run(at(br, wiring.add_command(br)), check=True)
        for br, batch in by_switch.items():
            run(at(br, wiring.bundle_command(br)), stdin=wiring.bundle_lines(batch, repeat),
                check=True)
        time.sleep(settle)
        seen = {br: wiring.parse_learned(run(at(br, wiring.dump_command(br)),
                                             check=True).stdout)
                for br in bridges}
    finally:
        for br in bridges:
            run(at(br, wiring.delete_command(br)))
    return wiring.compare(sent, seen)
