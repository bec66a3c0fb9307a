"""Is the fabric cabled as planned? The controller's answer read against the plan.

Counters cannot see a miswired cable: every port is up and every packet arrives, only at
another switch than the plan says. So the controller sends one identifiable frame out of
each end of every switch-to-switch link and says where each came back from, as LLDP
discovery does (``controllers.discovery``; ``ControllerClient.check_wiring`` asks for a
check). This module names what the answer means: each probe as the plan's link and far
end (``probes``), and the links whose frames arrived elsewhere than planned or nowhere
(``findings``, ``miswired``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controllers.discovery import probe_ends
from testbed.faultspec import link_name
from vocab.plan import WiringPlan


@dataclass(frozen=True)
class Probe:
    """Frame ``n``: out of ``switch`` port ``port``; the plan puts ``far`` at the other end."""

    n: int
    link: str  # the plan's name for the link (``lf0r0~spine1#0``)
    switch: str
    port: int
    far: tuple[str, int]


@dataclass(frozen=True)
class Misdelivery:
    """A probe that arrived elsewhere than planned (``seen``), or nowhere (None)."""

    link: str
    sent: tuple[str, int]
    planned: tuple[str, int]
    seen: tuple[str, int] | None

    def to_dict(self) -> dict[str, Any]:
        def end(e: tuple[str, int] | None) -> str | None:
            return None if e is None else f"{e[0]}:{e[1]}"
        return {"link": self.link, "sent_from": end(self.sent), "planned": end(self.planned),
                "seen": end(self.seen)}


def probes(plan: WiringPlan) -> list[Probe]:
    """One probe out of each end of every link between two switches, numbered as the
    controller numbers them (``controllers.discovery.probe_ends``)."""
    switches = {s.name for s in plan.switches}
    far: dict[tuple[str, int], tuple[str, int]] = {}
    names: dict[tuple[str, int], str] = {}
    for ln in plan.links:
        if ln.a in switches and ln.b in switches:
            a, b = (ln.a, ln.a_port), (ln.b, ln.b_port)
            far[a], far[b] = b, a
            names[a] = names[b] = link_name(plan, ln)
    return [Probe(n, names[end], end[0], end[1], far[end])
            for n, end in enumerate(probe_ends(plan))]


def findings(plan: WiringPlan, answer: Mapping[str, Any]) -> list[Misdelivery]:
    """The probes of the controller's ``answer`` (``ControllerClient.check_wiring``) that
    arrived elsewhere than ``plan`` says, or nowhere. A probe seen at several places
    counts as planned if one of them is; a probe the controller could not send (its
    switch not connected) says nothing and is left out."""
    rows = answer.get("probes") if isinstance(answer, Mapping) else None
    sent = probes(plan)
    if not isinstance(rows, list) or len(rows) != len(sent):
        raise ValueError("the controller's wiring answer does not match this plan")
    found = []
    for p, row in zip(sent, rows, strict=True):
        if tuple(row["from"]) != (p.switch, p.port):
            raise ValueError(f"the controller's probe {p.n} left {row['from']}, the plan's "
                             f"{p.switch}:{p.port}: another plan")
        if not row["sent"]:
            continue
        got = sorted((str(sw), int(port)) for sw, port in row["seen"])
        if p.far not in got:
            found.append(Misdelivery(p.link, (p.switch, p.port), p.far, got[0] if got else None))
    return found


def miswired(findings: Iterable[Misdelivery]) -> list[str]:
    """The links some of whose frames arrived at another port than planned (not those
    that arrived nowhere: a cable down is another fault)."""
    return sorted({f.link for f in findings if f.seen is not None})
