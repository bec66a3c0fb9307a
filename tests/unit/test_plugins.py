"""One plug-in mechanism (vocab.plugins) for all six kinds: found alike, refused alike.

Every kind (policies, topologies, fault kinds and their injectors, detectors, scenarios) is
a package of modules found by ``discover`` and served by a ``Plugins`` registry, so an
unknown name gets the same words whatever the kind, and a module whose name starts with
``_`` is never taken for a plug-in.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Protocol

import pytest

from controllers.policies import CONTROLLER_MODES, POLICIES
from ops.detectors import DETECTORS
from scenarios.experiments import SCENARIOS
from testbed.faultkinds import FAULT_KINDS
from testbed.shell.faults import INJECTORS
from testbed.topologies import TOPOLOGIES
from vocab.plugins import (
    Plugin,
    Plugins,
    discover,
    listing_key,
    plugin_name,
    required,
    unknown,
)

REGISTRIES = {"policy": POLICIES, "controller mode": CONTROLLER_MODES, "topology": TOPOLOGIES,
              "fault kind": FAULT_KINDS, "fault injector": INJECTORS, "detector": DETECTORS,
              "scenario": SCENARIOS}


@pytest.mark.parametrize("kind", REGISTRIES)
def test_an_unknown_name_is_the_same_error_for_every_kind(kind: str) -> None:
    reg = REGISTRIES[kind]
    assert reg.kind == kind
    with pytest.raises(ValueError) as err:
        reg.get("no-such-thing")
    assert str(err.value) == (f"unknown {kind} 'no-such-thing'; choose from "
                              f"{', '.join(reg.names())}")
    assert str(err.value) == str(unknown(kind, "no-such-thing", reg.names()))
    assert reg.find("no-such-thing") is None and "no-such-thing" not in reg
    first = reg.names()[0]
    assert reg.get(first) is not None and first in reg


@pytest.mark.parametrize("kind", REGISTRIES)
def test_every_kind_lists_exactly_its_packages_public_modules(kind: str) -> None:
    reg = REGISTRIES[kind]
    pkg = importlib.import_module(reg.package)
    public = {m.name for m in pkgutil.iter_modules(pkg.__path__)
              if not m.ispkg and not m.name.startswith("_")}
    listed = {(p.module if isinstance(p, Plugin) else sys.modules[p.fn.__module__])
              .__name__.rpartition(".")[2] for p in reg.all().values()}
    if reg is CONTROLLER_MODES:  # a subset by design
        assert listed < public
    else:
        assert listed == public


@pytest.fixture
def package(tmp_path: Path) -> str:
    """A throwaway package: two plug-ins, a private module, a subpackage, an ``__init__``."""
    root = tmp_path / "plugpkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text('"""Not a plug-in."""\n')
    (root / "zeta.py").write_text('"""Zeta does z."""\nVALUE = 1\n')
    (root / "two_words.py").write_text('"""Two words."""\nVALUE = 2\n')
    (root / "_shared.py").write_text("raise RuntimeError('a private module was imported')\n")
    (root / "sub" / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    yield "plugpkg"
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m == "plugpkg" or m.startswith("plugpkg.")]:
        del sys.modules[name]


def test_discover_skips_private_modules_and_packages(package: str) -> None:
    found = discover(package)
    assert list(found) == ["two-words", "zeta"]
    assert f"{package}._shared" not in sys.modules  # not even imported
    assert found["zeta"].VALUE == 1
    assert list(discover(package, dashes=False)) == ["two_words", "zeta"]
    assert plugin_name("a.b.two_words") == "two-words"
    assert plugin_name("a.b.two_words", dashes=False) == "two_words"


def test_a_folder_appended_to_the_path_before_the_first_lookup_is_searched(
        package: str, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "alpha.py").write_text('"""Alpha."""\nVALUE = 3\n')
    reg = Plugins("thing", package, lambda name, mod: mod.VALUE)
    importlib.import_module(package).__path__.append(str(extra))
    assert list(reg.all().items()) == [("alpha", 3), ("two-words", 2), ("zeta", 1)]


def test_a_module_places_itself_by_its_order_and_the_rest_follow_by_name(
        package: str, tmp_path: Path) -> None:
    """``ORDER`` sorts (lower first, ties by name); modules without one come after, by
    name; a registry that follows another lists its names in that one's order."""
    root = tmp_path / "plugpkg"
    (root / "zeta.py").write_text('"""Zeta."""\nORDER = 20\nVALUE = 1\n')
    (root / "mid.py").write_text('"""Mid."""\nORDER = 5\nVALUE = 4\n')
    (root / "tie.py").write_text('"""Tie."""\nORDER = 20\nVALUE = 5\n')
    (root / "late.py").write_text('"""Negative orders come first too."""\nORDER = -1\n'
                                  'VALUE = 6\n')
    assert list(discover(package)) == ["late", "mid", "tie", "zeta", "two-words"]
    reg = Plugins("thing", package, lambda name, mod: mod.VALUE)
    assert reg.names() == ("late", "mid", "tie", "zeta", "two-words")
    assert reg.where("odd", lambda v: v % 2 == 1).names() == ("tie", "zeta")
    follower = tmp_path / "follower"
    follower.mkdir()
    (follower / "__init__.py").write_text("")
    for stem in ("zeta", "two_words", "extra", "mid"):  # no ORDER: the leader's order
        (follower / f"{stem}.py").write_text(f"VALUE = {stem!r}\n")
    try:
        fol = Plugins("helper", "follower", lambda name, mod: mod.VALUE, follow=reg)
        assert fol.names() == ("mid", "zeta", "two-words", "extra")
    finally:
        for name in [m for m in sys.modules if m == "follower" or m.startswith("follower.")]:
            del sys.modules[name]


@pytest.mark.parametrize("order", ["'3'", "2.5", "True", "None"])
def test_an_order_that_is_not_an_int_is_named(package: str, tmp_path: Path,
                                               order: str) -> None:
    (tmp_path / "plugpkg" / "zeta.py").write_text(f"ORDER = {order}\n")
    if order == "None":  # None is the same as no ORDER
        assert list(discover(package)) == ["two-words", "zeta"]
        return
    with pytest.raises(ValueError, match=r"plugpkg.zeta: ORDER must be an int \(got "):
        discover(package)


@pytest.mark.parametrize("kind", REGISTRIES)
def test_every_kind_lists_its_modules_by_their_order(kind: str) -> None:
    """The listing users see (``astral-lab list``, ``policies``, a schedule's kinds, the
    detectors' run order) is each module's ``ORDER``, nothing else; whatever the modules
    are."""
    reg = REGISTRIES[kind]

    def module(p: object) -> ModuleType:
        return p.module if isinstance(p, Plugin) else sys.modules[p.fn.__module__]  # type: ignore[attr-defined]

    got = reg.all()
    keys = [listing_key(n, module(p)) for n, p in got.items()]
    if reg is INJECTORS:  # an injector lists where its kind does
        keys = [listing_key(n, FAULT_KINDS.get(n).module) for n in got]
    assert keys == sorted(keys)


class Contract(Protocol):
    """A toy contract: one required declaration, one optional, one required hook."""

    NEEDED: int
    OPTIONAL: str = "default"
    maybe: object = None

    def hook(self) -> int:
        """Required."""


class Thing(Plugin):
    CONTRACT = Contract


def test_a_plugin_reads_its_declarations_against_the_contract() -> None:
    assert required(Contract) == ("NEEDED", "hook")
    mod = ModuleType("x.thing", "A thing.\n\nMore.")
    mod.NEEDED, mod.hook = 5, lambda: 1
    thing = Thing("thing", mod)
    assert thing.declared("NEEDED") == 5 and thing.declared("OPTIONAL") == "default"
    assert thing.hook("hook") is mod.hook and thing.hook("maybe") is None
    assert thing.summary == "A thing" and thing.module_name == "thing"
    mod.OPTIONAL = "mine"
    assert thing.declared("OPTIONAL") == "mine"
    with pytest.raises(ValueError, match=r"x.bare defines no NEEDED, hook \(every Contract "
                                         r"does\)"):
        Thing("bare", ModuleType("x.bare"))


def test_a_subset_and_added_plugins_keep_the_one_wording(package: str) -> None:
    reg = Plugins("thing", package, lambda name, mod: mod.VALUE)
    odd = reg.where("odd thing", lambda v: v % 2 == 1)
    assert odd.names() == ("zeta",)
    with pytest.raises(ValueError, match="^unknown odd thing 'two-words'; choose from zeta$"):
        odd.get("two-words")
    reg.add("seven", 7)
    assert reg.names() == ("two-words", "zeta", "seven") and odd.names() == ("zeta", "seven")
    with pytest.raises(TypeError):
        odd.add("nine", 9)
    reg.remove("seven")
    assert reg.names() == ("two-words", "zeta")
