"""The optical shuffle: how Astral 3.0 lets two tiers reach three-tier scale.

A leaf uplink port is a multi-lane optic (e.g. 1.6T = 8 x 200G lanes). Cabled
straight, the whole port lands on one spine, so a leaf with U uplink ports sees
only U spines. A passive shuffle box (a fibre transpose, no electronics) takes
L leaf ports of L lanes each and regroups them: its output port ``o`` carries
lane ``o`` of every input. Each output goes to one spine port, so every lane of
a leaf port lands on a different spine, and a leaf reaches U x L spines: the
effective radix of the leaf grows by L, which is why a flattened two-tier
fabric can reach the size that otherwise needs a third tier.

``OpticalShuffle`` is the explicit map (leaf, uplink port, lane) -> (spine,
spine port) plus the boxes that realise it. It is plain data, validated, and
written into the wiring plan so a user can inspect it lane by lane.

The rule: number a leaf's lanes ``k = port * L + lane``. Lane ``k`` goes to
spine ``k mod S``; when a leaf has more lanes than there are spines it gives
each spine ``m = U*L/S`` lanes, the ``r = k // S``-th of which lands on spine
port ``leaf * m + r + 1``. Box ``(port, leaf // L)`` gathers port ``port`` of
leaves ``L*g .. L*g+L-1``; its output ``o`` therefore carries lanes that all go
to spine ``(port * L + o) mod S``, so each box output is one trunk to one spine.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Lane:
    """One lane's route through the shuffle."""

    leaf: int  # leaf index, 0..leaves-1
    port: int  # uplink port of the leaf, 0..uplinks-1
    lane: int  # lane inside that port, 0..lanes-1
    spine: int  # spine index, 0..spines-1
    spine_port: int  # lane-level port on the spine, 1-based (OpenFlow numbering)
    box: int  # shuffle box index
    box_in: int  # input port of the box (which leaf of the box's group)
    box_out: int  # output port of the box (== lane)


class OpticalShuffle:
    """Map of every leaf uplink lane to a spine port, through shuffle boxes.

    ``leaves`` leaves each have ``uplinks`` ports of ``lanes`` lanes; ``spines``
    spines must divide ``uplinks * lanes`` so that every leaf spreads its lanes
    evenly (the same number to every spine).
    """

    def __init__(self, leaves: int, uplinks: int, lanes: int, spines: int) -> None:
        for name, value in (("leaves", leaves), ("uplinks", uplinks), ("lanes", lanes),
                            ("spines", spines)):
            if value < 1:
                raise ValueError(f"shuffle {name} must be >= 1 (got {value})")
        per_leaf = uplinks * lanes
        if per_leaf % spines:
            raise ValueError(
                f"spines={spines} must divide the lanes per leaf (uplinks x lanes = {per_leaf}) "
                "so every leaf spreads its lanes evenly over all spines"
            )
        self.leaves = leaves
        self.uplinks = uplinks
        self.lanes = lanes
        self.spines = spines
        self.per_spine = per_leaf // spines  # m: lanes from each leaf to each spine
        self.groups = -(-leaves // lanes)  # leaf groups per box column (ceil)
        self._table = [self._route(leaf, p, ln)
                       for leaf in range(leaves) for p in range(uplinks) for ln in range(lanes)]

    def _route(self, leaf: int, port: int, lane: int) -> Lane:
        k = port * self.lanes + lane
        spine = k % self.spines
        r = k // self.spines
        return Lane(
            leaf=leaf, port=port, lane=lane, spine=spine,
            spine_port=leaf * self.per_spine + r + 1,
            box=port * self.groups + leaf // self.lanes,
            box_in=leaf % self.lanes, box_out=lane,
        )

    # --- queries -----------------------------------------------------------------------
    def map(self, leaf: int, port: int, lane: int) -> Lane:
        """Where lane ``lane`` of uplink port ``port`` of leaf ``leaf`` lands."""
        if not (0 <= leaf < self.leaves and 0 <= port < self.uplinks and 0 <= lane < self.lanes):
            raise ValueError(f"no such lane: leaf {leaf} port {port} lane {lane}")
        return self._table[(leaf * self.uplinks + port) * self.lanes + lane]

    @property
    def table(self) -> list[Lane]:
        return list(self._table)

    @property
    def boxes(self) -> int:
        """Number of shuffle boxes (each L inputs x L outputs, L = lanes per port)."""
        return len({x.box for x in self._table})

    @property
    def spine_ports_used(self) -> int:
        """Lane-level ports each spine needs: one per lane that reaches it."""
        return self.leaves * self.per_spine

    def spines_reached_without_shuffle(self) -> int:
        """What a leaf would reach if each uplink port were cabled whole to one spine."""
        return min(self.uplinks, self.spines)

    # --- checks ------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ``ValueError`` unless the shuffle is a proper even, conflict-free spread.

        Every leaf sends exactly ``per_spine`` lanes to every spine; no (spine, port)
        is used twice; every box input/output pair is used at most once; each box
        output feeds exactly one spine (one trunk, as a real box does).
        """
        per_pair = Counter((x.leaf, x.spine) for x in self._table)
        for leaf in range(self.leaves):
            for spine in range(self.spines):
                got = per_pair[(leaf, spine)]
                if got != self.per_spine:
                    raise ValueError(
                        f"leaf {leaf} has {got} lanes to spine {spine}, want {self.per_spine}"
                    )
        ends = Counter((x.spine, x.spine_port) for x in self._table)
        dup = [k for k, c in ends.items() if c > 1]
        if dup:
            raise ValueError(f"spine port used twice: spine {dup[0][0]} port {dup[0][1]}")
        box_io = Counter((x.box, x.box_in, x.box_out) for x in self._table)
        if any(c > 1 for c in box_io.values()):
            raise ValueError("a shuffle box input/output pair carries two lanes")
        trunk: dict[tuple[int, int], set[int]] = {}
        for x in self._table:
            trunk.setdefault((x.box, x.box_out), set()).add(x.spine)
        if any(len(s) != 1 for s in trunk.values()):
            raise ValueError("a shuffle box output feeds more than one spine")

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the wiring plan: parameters, counts and the full lane table."""
        return {
            "leaves": self.leaves,
            "uplinks_per_leaf": self.uplinks,
            "lanes_per_uplink": self.lanes,
            "spines": self.spines,
            "lanes_per_leaf_spine_pair": self.per_spine,
            "boxes": self.boxes,
            "box_size": f"{self.lanes}x{self.lanes}",
            "spines_reached_per_leaf": self.spines,
            "spines_reached_without_shuffle": self.spines_reached_without_shuffle(),
            "columns": ["leaf", "port", "lane", "spine", "spine_port", "box", "box_in",
                        "box_out"],
            "lanes": [[x.leaf, x.port, x.lane, x.spine, x.spine_port, x.box, x.box_in,
                       x.box_out] for x in self._table],
        }
