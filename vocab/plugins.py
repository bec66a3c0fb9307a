"""How the lab finds its plug-ins: a package's every module is one plug-in. Pure.

Load-balancing policies, topologies, fault kinds (their pure half and their injector half),
detectors and scenarios are each a folder of modules, one per plug-in, so a new one is a
new file: copy the closest module under a new name. This is the one mechanism all six
use, in the bottom layer so every package can:

* ``discover`` turns a package into an ordered name -> module mapping (a module whose name
  starts with ``_`` is not a plug-in: it holds what the plug-ins share). A module places
  itself in the listing with ``ORDER = <int>`` (lower first, ties by name); modules without
  one follow, by name, so the order is declared where the plug-in is, not in a list;
* ``Plugins`` is one kind's registry (``POLICIES``, ``TOPOLOGIES``, ...): ``names()``,
  ``get(name)`` and the one error for an unknown name (``unknown``), the same words for
  every kind;
* ``Plugin`` is a plug-in module read against its kind's contract: a ``typing.Protocol``
  that names every declaration and hook once. A member the contract gives a value is
  optional (the value is the default, None for an optional hook); the others (bare
  annotations, methods) every module must define.

Discovery is lazy (the first ``names()``/``get()``), so a folder appended to a package's
``__path__`` before that is searched too: that is how the tests drop a copied module in.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar, Generic, TypeVar

P = TypeVar("P")


def plugin_name(module: str, dashes: bool = True) -> str:
    """The plug-in name of ``module`` (a dotted module name): its last part, with ``_``
    written ``-`` when ``dashes`` (``controllers.policies.ecmp_fluid`` is ``ecmp-fluid``)."""
    last = module.rpartition(".")[2]
    return last.replace("_", "-") if dashes else last


def discover(package: str, dashes: bool = True) -> dict[str, ModuleType]:
    """Every module of ``package`` (searched along its ``__path__``) whose name does not
    start with ``_``, imported, by ``plugin_name``, in listing order (``listing_key``)."""
    path = importlib.import_module(package).__path__
    found = {}
    for info in pkgutil.iter_modules(list(path)):
        if not info.name.startswith("_") and not info.ispkg:
            found[plugin_name(info.name, dashes)] = importlib.import_module(
                f"{package}.{info.name}")
    return {n: found[n] for n in sorted(found, key=lambda n: listing_key(n, found[n]))}


def listing_key(name: str, module: ModuleType) -> tuple[int, int, str]:
    """Where a plug-in lists: by its module's ``ORDER`` (an int), ties by name, then the
    modules that declare none, by name. A non-integer ``ORDER`` is a ValueError naming the
    module, since a typo there would silently move the plug-in to the end."""
    order = getattr(module, "ORDER", None)
    if order is None:
        return (1, 0, name)
    if not isinstance(order, int) or isinstance(order, bool):
        raise ValueError(f"{module.__name__}: ORDER must be an int (got {order!r})")
    return (0, order, name)


def unknown(kind: str, name: object, known: Iterable[str]) -> ValueError:
    """The one error for a name no plug-in of ``kind`` has: the closest name when one is
    close (``did you mean``), and always the ones there are."""
    return ValueError(f"unknown {kind} {name!r}; {suggest(name, known)}")


def suggest(name: object, known: Iterable[str]) -> str:
    """``did you mean X? choose from A, B, ...`` (difflib's closest), or only the list:
    a mistyped name is answered with the name meant, not just every name."""
    names = [str(k) for k in known]
    close = difflib.get_close_matches(str(name), names, n=1, cutoff=0.6)
    listed = f"choose from {', '.join(names)}"
    return f"did you mean {close[0]}? ({listed})" if close else listed


def required(contract: type) -> tuple[str, ...]:
    """The members of ``contract`` every plug-in module must define: annotated names with no
    value on the class, and methods. A member with a value is optional (that is its default)."""
    own = vars(contract)
    names = [n for n in getattr(contract, "__annotations__", {}) if n not in own]
    names += [n for n, v in own.items() if inspect.isfunction(v) and not n.startswith("_")]
    return tuple(names)


@dataclass(frozen=True)
class Plugin:
    """A plug-in module, read against its kind's contract (``CONTRACT``, a Protocol).

    A kind subclasses this to give each declaration a typed property; ``declared`` reads the
    module's value or the contract's default, so the defaults are written once, in the
    contract. Making one checks that the module defines what the contract requires.
    """

    name: str
    module: ModuleType

    #: the kind's contract: what a module declares and implements (see ``required``)
    CONTRACT: ClassVar[type] = object

    def __post_init__(self) -> None:
        missing = [m for m in required(self.CONTRACT) if not hasattr(self.module, m)]
        if missing:
            raise ValueError(f"{self.module.__name__} defines no {', '.join(missing)} "
                             f"(every {self.CONTRACT.__name__} does)")

    def declared(self, attr: str) -> Any:
        """The module's ``attr``, else the contract's default for it."""
        if hasattr(self.module, attr):
            return getattr(self.module, attr)
        return getattr(self.CONTRACT, attr)

    def hook(self, attr: str) -> Callable[..., Any] | None:
        """The module's function ``attr``, or None when it leaves that optional hook out."""
        fn = getattr(self.module, attr, None)
        return fn if callable(fn) else None

    @property
    def summary(self) -> str:
        """The first line of the module's docstring: what the plug-in is, for listings."""
        doc = (self.module.__doc__ or "").strip()
        return doc.splitlines()[0].rstrip(".") if doc else ""

    @property
    def module_name(self) -> str:
        return self.module.__name__.rpartition(".")[2]


class Plugins(Generic[P]):
    """One kind's registry: the modules of ``package``, each made a ``P`` by ``wrap``.

    ``kind`` is the word the error uses ("policy", "topology", ...); the modules list in
    their ``ORDER`` (``discover``); ``dashes`` as in ``plugin_name``. ``follow`` is the
    registry this one serves (a fault kind's injectors serve its kinds): its names come
    first in its order, then the rest as ``discover`` lists them, so one ``ORDER`` orders
    both halves. A registry made by ``where`` is a subset of another under its own word
    (the policies a controller runs are its "controller mode"s). ``add`` takes a plug-in
    made outside the package (a notebook's, a test's), listed after the package's own.
    """

    def __init__(self, kind: str, package: str, wrap: Callable[[str, ModuleType], P], *,
                 dashes: bool = True, follow: Plugins[Any] | None = None) -> None:
        self.kind, self.package = kind, package
        self._wrap, self._dashes, self._follow = wrap, dashes, follow
        self._found: dict[str, P] | None = None
        self._added: dict[str, P] = {}
        self._parent: Plugins[P] | None = None
        self._keep: Callable[[P], bool] = lambda _p: True

    def all(self) -> dict[str, P]:
        """Every plug-in of this kind, by name, in listing order (found on the first call)."""
        if self._parent is not None:
            return {n: p for n, p in self._parent.all().items() if self._keep(p)}
        if self._found is None:
            found = discover(self.package, self._dashes)
            if self._follow is not None:
                head = [n for n in self._follow.names() if n in found]
                found = {n: found[n] for n in head + [n for n in found if n not in head]}
            self._found = {n: self._wrap(n, m) for n, m in found.items()}
        return {**self._found, **self._added}

    def names(self) -> tuple[str, ...]:
        return tuple(self.all())

    def find(self, name: str) -> P | None:
        """The plug-in called ``name``, or None."""
        return self.all().get(name)

    def get(self, name: str) -> P:
        """The plug-in called ``name``; the one ``unknown`` ValueError otherwise."""
        found = self.all()
        if name not in found:
            raise unknown(self.kind, name, found)
        return found[name]

    def __contains__(self, name: object) -> bool:
        return name in self.all()

    def where(self, kind: str, keep: Callable[[P], bool]) -> Plugins[P]:
        """The plug-ins ``keep`` accepts, as a registry whose errors say ``kind``."""
        sub: Plugins[P] = Plugins(kind, self.package, self._wrap, dashes=self._dashes)
        sub._parent, sub._keep = self, keep
        return sub

    def add(self, name: str, plugin: P) -> None:
        """List ``plugin`` (made outside the package) under ``name`` until ``remove``."""
        if self._parent is not None:
            raise TypeError(f"add to the registry this {self.kind} subset is taken from")
        if name in self.all():
            raise ValueError(f"{self.kind} {name!r} exists already")
        self._added[name] = plugin

    def remove(self, name: str) -> None:
        """Forget a plug-in ``add`` listed (a package's own stay)."""
        self._added.pop(name, None)
