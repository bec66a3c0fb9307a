"""The optical shuffle: every leaf uplink lane mapped to a spine port through passive boxes.

Reading guide: a leaf has ``uplinks`` multi-lane ports of ``lanes`` lanes each. Cabled
straight, one port lands on one spine. A shuffle box regroups lanes so that each lane
of a port lands on a different spine, so every leaf reaches every spine with the same
number of lanes. These tests pin down that promise and prove ``validate()`` notices
when a table breaks it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict

import pytest

from testbed.shuffle import Lane, OpticalShuffle

# (leaves, uplinks per leaf, lanes per uplink, spines). Spines always divide uplinks x lanes.
COMBOS = [
    (1, 1, 1, 1),  # degenerate: one leaf, one single-lane port, one spine
    (1, 1, 8, 8),  # one leaf, one 8-lane port fanned out to 8 spines
    (4, 1, 4, 4),  # one box column, exactly one full box
    (16, 1, 4, 4),  # the lab default: 16 leaves, 1 x 800G (4 x 200G) uplink, 4 spines
    (16, 2, 4, 8),  # two uplink ports, every lane to a different spine
    (16, 2, 4, 4),  # fewer spines than lanes: 2 lanes per (leaf, spine) pair
    (5, 2, 4, 8),  # leaves not a multiple of lanes: the last box is partly filled
    (8, 4, 2, 8),
    (8, 4, 2, 2),  # spines <= uplinks: the shuffle brings no extra reach here
    (3, 3, 8, 24),
    (6, 4, 4, 2),  # 8 lanes per (leaf, spine) pair
    (7, 2, 8, 16),
    (128, 16, 4, 64),  # 4096 GPUs worth of leaves
]

IDS = [f"L{lv}-U{u}-x{ln}-S{s}" for lv, u, ln, s in COMBOS]


@pytest.fixture(params=COMBOS, ids=IDS)
def shuffle(request: pytest.FixtureRequest) -> OpticalShuffle:
    leaves, uplinks, lanes, spines = request.param
    return OpticalShuffle(leaves=leaves, uplinks=uplinks, lanes=lanes, spines=spines)


def test_every_combo_validates(shuffle: OpticalShuffle) -> None:
    shuffle.validate()


def test_table_has_each_lane_exactly_once(shuffle: OpticalShuffle) -> None:
    keys = [(x.leaf, x.port, x.lane) for x in shuffle.table]
    expected = {(leaf, p, ln) for leaf in range(shuffle.leaves)
                for p in range(shuffle.uplinks) for ln in range(shuffle.lanes)}
    assert len(keys) == len(expected)
    assert set(keys) == expected


def test_every_leaf_spreads_evenly_over_all_spines(shuffle: OpticalShuffle) -> None:
    per_spine = shuffle.uplinks * shuffle.lanes // shuffle.spines
    assert shuffle.per_spine == per_spine
    per_pair = Counter((x.leaf, x.spine) for x in shuffle.table)
    for leaf in range(shuffle.leaves):
        counts = [per_pair[(leaf, spine)] for spine in range(shuffle.spines)]
        assert counts == [per_spine] * shuffle.spines, f"leaf {leaf}"


def test_no_spine_port_is_used_twice(shuffle: OpticalShuffle) -> None:
    ends = Counter((x.spine, x.spine_port) for x in shuffle.table)
    assert max(ends.values()) == 1
    # Spine ports are OpenFlow numbers: 1..spine_ports_used, all of them used, none beyond.
    for spine in range(shuffle.spines):
        ports = sorted(p for s, p in ends if s == spine)
        assert ports == list(range(1, shuffle.spine_ports_used + 1)), f"spine {spine}"


def test_each_box_output_feeds_exactly_one_spine(shuffle: OpticalShuffle) -> None:
    feeds: dict[tuple[int, int], set[int]] = defaultdict(set)
    for x in shuffle.table:
        feeds[(x.box, x.box_out)].add(x.spine)
    assert all(len(spines) == 1 for spines in feeds.values())


def test_boxes_are_lanes_by_lanes_and_gather_one_port_of_distinct_leaves(
        shuffle: OpticalShuffle) -> None:
    by_box: dict[int, list[Lane]] = defaultdict(list)
    for x in shuffle.table:
        by_box[x.box].append(x)
    assert len(by_box) == shuffle.boxes
    # One column of boxes per uplink port, ceil(leaves / lanes) boxes per column.
    assert shuffle.boxes == shuffle.uplinks * -(-shuffle.leaves // shuffle.lanes)
    for box, lanes in by_box.items():
        assert len({x.port for x in lanes}) == 1, f"box {box} mixes uplink ports"
        leaves_in = {x.leaf for x in lanes}
        assert len(leaves_in) <= shuffle.lanes, f"box {box} has too many inputs"
        # Input i is one leaf; output o is lane o of every input.
        assert len({(x.leaf, x.box_in) for x in lanes}) == len(leaves_in)
        assert all(x.box_out == x.lane for x in lanes)
        assert all(0 <= x.box_in < shuffle.lanes for x in lanes)


def test_map_agrees_with_table(shuffle: OpticalShuffle) -> None:
    for x in shuffle.table:
        assert shuffle.map(x.leaf, x.port, x.lane) == x


@pytest.mark.parametrize("combo", [(1, 1, 1, 1), (5, 2, 4, 8)], ids=["one-lane", "part-full"])
@pytest.mark.parametrize("leaf, port, lane", [(-1, 0, 0), (None, 0, 0), (0, -1, 0),
                                              (0, None, 0), (0, 0, -1), (0, 0, None)])
def test_map_rejects_a_lane_that_does_not_exist(combo: tuple[int, int, int, int],
                                                leaf: int | None, port: int | None,
                                                lane: int | None) -> None:
    """Each bound of each dimension (the same check at every size: the smallest shuffle,
    and one whose last box is partly filled)."""
    leaves, uplinks, lanes, spines = combo
    shuffle = OpticalShuffle(leaves=leaves, uplinks=uplinks, lanes=lanes, spines=spines)
    # None stands for "one past the end" of that dimension.
    args = [shuffle.leaves if leaf is None else leaf,
            shuffle.uplinks if port is None else port,
            shuffle.lanes if lane is None else lane]
    with pytest.raises(ValueError, match="no such lane"):
        shuffle.map(*args)


def test_to_dict_lists_the_same_lanes(shuffle: OpticalShuffle) -> None:
    d = shuffle.to_dict()
    rows = [dict(zip(d["columns"], row, strict=True)) for row in d["lanes"]]
    assert rows == [dataclasses.asdict(x) for x in shuffle.table]
    assert d["boxes"] == shuffle.boxes
    assert d["box_size"] == f"{shuffle.lanes}x{shuffle.lanes}"
    assert d["lanes_per_leaf_spine_pair"] == shuffle.per_spine


@pytest.mark.parametrize("leaves, uplinks, lanes", [(16, 1, 4), (16, 2, 4), (8, 1, 8),
                                                    (4, 4, 2), (3, 2, 8)])
def test_the_shuffle_multiplies_a_leafs_reach_by_the_lanes_per_port(
        leaves: int, uplinks: int, lanes: int) -> None:
    """The point of the box: cabled whole, a leaf sees one spine per uplink port."""
    spines = uplinks * lanes  # the full spread: one lane to every spine
    shuffle = OpticalShuffle(leaves, uplinks, lanes, spines)
    reached = {leaf: {x.spine for x in shuffle.table if x.leaf == leaf}
               for leaf in range(leaves)}
    assert all(len(s) == spines for s in reached.values())
    assert shuffle.spines_reached_without_shuffle() == uplinks
    assert shuffle.spines_reached_without_shuffle() < spines


def test_without_shuffle_reach_is_capped_by_spines() -> None:
    # 4 ports cabled whole onto 2 spines still reach only 2 spines.
    assert OpticalShuffle(8, 4, 2, 2).spines_reached_without_shuffle() == 2


# --- validate() must catch broken tables -------------------------------------------------
def _index(s: OpticalShuffle, leaf: int, port: int, lane: int) -> int:
    return s.table.index(s.map(leaf, port, lane))


def test_validate_catches_a_lane_moved_to_another_spine() -> None:
    s = OpticalShuffle(8, 1, 4, 4)
    i = _index(s, 0, 0, 0)
    x = s._table[i]
    s._table[i] = dataclasses.replace(x, spine=(x.spine + 1) % s.spines)
    with pytest.raises(ValueError, match="leaf 0 has"):
        s.validate()


def test_validate_catches_two_lanes_on_one_spine_port() -> None:
    s = OpticalShuffle(8, 1, 4, 4)
    a, b = s.map(0, 0, 1), s.map(1, 0, 1)  # same lane of two leaves: same spine
    assert a.spine == b.spine and a.spine_port != b.spine_port
    s._table[s._table.index(b)] = dataclasses.replace(b, spine_port=a.spine_port)
    with pytest.raises(ValueError, match="spine port used twice"):
        s.validate()


def test_validate_catches_two_lanes_on_one_box_input_output_pair() -> None:
    s = OpticalShuffle(8, 1, 4, 4)
    a, b = s.map(0, 0, 2), s.map(1, 0, 2)  # same box, same output, different inputs
    assert (a.box, a.box_out) == (b.box, b.box_out) and a.box_in != b.box_in
    s._table[s._table.index(b)] = dataclasses.replace(b, box_in=a.box_in)
    with pytest.raises(ValueError, match="input/output pair"):
        s.validate()


def test_validate_catches_a_box_output_that_feeds_two_spines() -> None:
    s = OpticalShuffle(8, 1, 4, 4)
    # Swap the box outputs of two lanes of leaf 0: per-pair counts, spine ports and the
    # box input/output pairs all stay unique, but output 0 now mixes two spines.
    a, b = s.map(0, 0, 0), s.map(0, 0, 1)
    s._table[s._table.index(a)] = dataclasses.replace(a, box_out=b.box_out)
    s._table[s._table.index(b)] = dataclasses.replace(b, box_out=a.box_out)
    with pytest.raises(ValueError, match="feeds more than one spine"):
        s.validate()


@pytest.mark.parametrize("kwargs, name", [
    (dict(leaves=0, uplinks=1, lanes=4, spines=4), "leaves"),
    (dict(leaves=4, uplinks=0, lanes=4, spines=4), "uplinks"),
    (dict(leaves=4, uplinks=1, lanes=0, spines=4), "lanes"),
    (dict(leaves=4, uplinks=1, lanes=4, spines=0), "spines"),
    (dict(leaves=4, uplinks=1, lanes=4, spines=3), "spines"),  # 3 does not divide 4 lanes
    (dict(leaves=4, uplinks=2, lanes=4, spines=16), "spines"),  # more spines than lanes
])
def test_constructor_rejects_impossible_shuffles(kwargs: dict[str, int], name: str) -> None:
    with pytest.raises(ValueError) as exc:
        OpticalShuffle(**kwargs)
    assert name in str(exc.value)
