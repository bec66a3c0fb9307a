"""What every detector module shares: the plan's view (``Topo``), ``Finding``, ``Alert`` and
two helpers. Pure: no sockets, no clock, no Mininet.

"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ops.telemetry import link_components
from vocab.plan import WiringPlan

SEVERITIES = ("info", "warning", "critical")

@dataclass
class Topo:
    """What detectors need from the wiring plan: rates, ends, which uplinks are siblings."""

    links: dict[str, Any]  # component -> vocab.plan.Link
    hosts: set[str]
    switch_links: dict[str, list[str]]  # switch -> its link components
    uplinks: dict[str, list[str]]  # leaf -> its uplink lane components (ECMP siblings)
    nic_link: dict[str, str]  # host -> its NIC link component

    @classmethod
    def from_plan(cls, plan: WiringPlan) -> Topo:
        links = link_components(plan)
        hosts = {h.name for h in plan.hosts}
        switch_links: dict[str, list[str]] = {s.name: [] for s in plan.switches}
        uplinks: dict[str, list[str]] = {}
        nic_link = {}
        for comp, ln in links.items():
            for end in (ln.a, ln.b):
                if end in switch_links:
                    switch_links[end].append(comp)
            if ln.a in hosts:
                nic_link[ln.a] = comp
            elif ln.kind in ("lane", "uplink"):
                uplinks.setdefault(ln.a, []).append(comp)
        return cls(links, hosts, switch_links, uplinks, nic_link)

    def mbps(self, comp: str) -> float:
        return float(self.links[comp].mbps)


@dataclass
class Finding:
    """A condition that holds at the latest poll."""

    detector: str
    component: str
    severity: str
    summary: str
    evidence: dict[str, Any]
    since: float  # time of the first poll of the current run of bad polls


@dataclass
class Alert:
    """A deduplicated finding over time: opened, refreshed while it holds, cleared after."""

    detector: str
    component: str
    severity: str
    summary: str
    evidence: dict[str, Any]
    first_seen: float
    last_seen: float
    cleared: float | None = None
    opened: float | None = None  # poll time at which the alert was raised (detection time)
    id: int | None = None
    absent: int = field(default=0, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "detector": self.detector, "severity": self.severity,
                "component": self.component, "summary": self.summary,
                "evidence": self.evidence, "first_seen": self.first_seen,
                "last_seen": self.last_seen, "cleared": self.cleared, "opened": self.opened}


# --- helpers -------------------------------------------------------------------------------
def _run_start(times: list[float], ok: list[bool]) -> tuple[int, float | None]:
    """Length of the run of True at the end of ``ok`` and the time it began."""
    n = 0
    for flag in reversed(ok):
        if not flag:
            break
        n += 1
    return n, (times[-n] if n else None)


def _rounded(values: list[float | None], digits: int = 2) -> list[float | None]:
    return [None if v is None else round(v, digits) for v in values]


