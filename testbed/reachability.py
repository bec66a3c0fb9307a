"""What an all-pairs ping found, and reading it from ``fping``'s summary lines.

``Lab.reachability`` runs ``fping`` on every host; the result it returns
(``Reachability``) and the parsing of each run's summary (``fping_unreached``) are plain
data and text, apart from ``testbed.shell.lab`` so they are read and unit-tested without a
fabric. ``testbed.shell.lab`` re-exports both.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Reachability:
    """Result of an all-pairs ping: every ordered pair of GPU NICs, one ICMP echo each."""

    pairs: int
    received: int
    first_try_lost: int
    failed: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def loss_pct(self) -> float:
        return 100.0 * (self.pairs - self.received) / self.pairs if self.pairs else 0.0

    def __str__(self) -> str:
        s = (f"all-pairs ping: {self.received}/{self.pairs} pairs reached, "
             f"{self.loss_pct:.1f}% loss in {self.seconds:.1f} s")
        if self.first_try_lost:
            s += f" ({self.first_try_lost} needed a retry)"
        if self.failed:
            s += "; unreachable: " + ", ".join(f"{a}->{b}" for a, b in self.failed[:5])
        return s


def fping_unreached(stderr: str, targets: list[str]) -> list[str]:
    """Targets whose fping summary line shows no reply (``... = 1/0/100%``) or is missing."""
    reached = set()
    for line in stderr.splitlines():
        if " : xmt/rcv/%loss = " not in line:
            continue
        ip, rest = line.split(" : ", 1)
        counts = rest.split("=", 1)[1].split(",", 1)[0].strip()  # "1/1/0%"
        try:
            rcv = int(counts.split("/")[1])
        except (IndexError, ValueError):
            continue
        if rcv > 0:
            reached.add(ip.strip())
    return [t for t in targets if t not in reached]
