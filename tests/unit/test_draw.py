"""Tests for ``testbed.draw``: every topology renders to a real, non-blank PNG, atomically.

The pictures go into the README and into run reports, so the tests check what a
reader depends on: a valid PNG of useful size with something drawn on it, no
temporary files left behind, the old picture kept when a render fails, and big
plans that still render (quickly enough for the 256-GPU case).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from testbed.draw import _layout, draw_plan
from testbed.topologies import TOPOLOGIES, build
from vocab.plan import WiringPlan

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BIG = {"servers": 512, "servers_per_block": 32, "lanes_per_uplink": 8, "radix": 1024}


def assert_good_png(path: Path) -> tuple[int, int]:
    """A valid PNG, larger than 300 px both ways, with a real drawing on it."""
    data = path.read_bytes()
    assert len(data) > 0
    assert data[:8] == PNG_MAGIC, "not a PNG"
    with Image.open(path) as img:
        img.verify()  # checks chunk CRCs: a truncated file fails here
    with Image.open(path) as img:
        width, height = img.size
        pixels = np.asarray(img.convert("RGB"))
    assert width > 300 and height > 300, (width, height)
    inked = (pixels.min(axis=2) < 200).mean()
    assert inked > 0.01, f"picture is nearly blank ({inked:.1%} non-white pixels)"
    packed = pixels.astype(np.uint32) @ np.array([1 << 16, 1 << 8, 1], dtype=np.uint32)
    colours = len(np.unique(packed))
    assert colours > 8, "expected rail colours, not a monochrome picture"
    return width, height


def assert_no_temp_files(directory: Path, expected: set[str]) -> None:
    assert set(os.listdir(directory)) == expected


@pytest.mark.parametrize("topology", TOPOLOGIES.names())
def test_each_topology_renders_a_png(tmp_path: Path, topology: str) -> None:
    out = tmp_path / f"{topology}.png"
    returned = draw_plan(build(topology), str(out))
    assert returned == str(out)
    assert_good_png(out)
    assert_no_temp_files(tmp_path, {out.name})


def test_title_and_nested_directory(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "fabric.png"
    draw_plan(build("rail3"), str(out), title="my fabric")
    assert_good_png(out)
    assert_no_temp_files(out.parent, {"fabric.png"})


def test_plan_loaded_from_json_renders(tmp_path: Path) -> None:
    """The CLI draws plans read back from disk; JSON round-trip must not lose what draw needs."""
    plan = build("astral3")
    plan.save(tmp_path / "plan.json")
    out = tmp_path / "fabric.png"
    draw_plan(WiringPlan.load(tmp_path / "plan.json"), str(out))
    assert_good_png(out)


def test_overwrite_replaces_old_picture(tmp_path: Path) -> None:
    out = tmp_path / "fabric.png"
    out.write_bytes(b"old")
    draw_plan(build("fattree"), str(out))
    assert_good_png(out)
    assert_no_temp_files(tmp_path, {"fabric.png"})


def test_failed_write_keeps_old_file_and_leaves_no_temp(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """If the final rename fails, the previous picture survives and the temp file is removed."""
    out = tmp_path / "fabric.png"
    out.write_bytes(b"previous good picture")
    renames: list[str] = []

    def failing_replace(src: str, dst: str) -> None:
        renames.append(src)
        assert os.path.getsize(src) > 0  # the PNG was fully written to the temp file first
        raise OSError("rename failed")

    monkeypatch.setattr("testbed.draw.os.replace", failing_replace)
    with pytest.raises(OSError, match="rename failed"):
        draw_plan(build("astral3"), str(out))
    assert renames and os.path.dirname(renames[0]) == str(tmp_path)  # temp in the same dir
    assert out.read_bytes() == b"previous good picture"
    assert_no_temp_files(tmp_path, {"fabric.png"})


def test_astral3_rows_put_shuffle_between_leaves_and_spines() -> None:
    """Hosts at the bottom, then leaves, the shuffle boxes, and spines on top."""
    lay = _layout(build("astral3"))
    labels = [row.label.split("\n")[0] for row in lay.rows]
    assert labels == ["GPU NICs", "leaf", "optical shuffle", "spine"]
    assert [row.y for row in lay.rows] == sorted(row.y for row in lay.rows)
    assert lay.box_row is not None and len(lay.box_row.xs) == build("astral3").counts[
        "shuffle_boxes"]
    leaves = next(r for r in lay.rows if r.label.startswith("leaf")).names
    assert leaves[:3] == ["lf0r0", "lf0r1", "lf0r2"]  # block-major, then rail


def test_hosts_grouped_by_server() -> None:
    lay = _layout(build("rail3"))
    assert lay.host_row is not None
    assert lay.host_row.names[:9] == [f"s0g{g}" for g in range(8)] + ["s1g0"]


def test_256_gpu_astral3_draws(tmp_path: Path) -> None:
    """The largest fabric the lab brings up still draws (its time is printed, not asserted:
    a shared machine's load would decide such an assertion)."""
    plan = build("astral3", servers=32, servers_per_block=8)
    out = tmp_path / "astral3-256.png"
    start = time.monotonic()
    draw_plan(plan, str(out))
    print(f"256-GPU astral3 drawn in {time.monotonic() - start:.1f} s")
    assert_good_png(out)


@pytest.mark.parametrize("topology", ["astral3", "railonly"])
def test_big_plan_renders(tmp_path: Path, topology: str) -> None:
    plan = build(topology, **BIG)
    assert len(plan.hosts) == 4096
    out = tmp_path / f"{topology}-big.png"
    draw_plan(plan, str(out))
    assert_good_png(out)
    assert_no_temp_files(tmp_path, {out.name})
