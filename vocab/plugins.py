"""How the lab finds its plug-in modules: a package's every module is one plug-in. Pure.

Load-balancing policies, topologies, fault kinds and detectors are each a folder of
modules, one per plug-in, so a new one is a new file. This is the one place that turns
such a folder into an ordered name -> module mapping (it sits in the bottom layer so every
package can use it).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from types import ModuleType


def discover(package: str, path: Iterable[str], first: Iterable[str] = (),
             dashes: bool = True) -> dict[str, ModuleType]:
    """Every module of ``package`` (its ``__path__``) not starting with ``_``, imported, by
    name: the module name, with ``_`` written ``-`` when ``dashes``. Names in ``first``
    come first in that order (the shipped plug-ins), then the rest by name."""
    found = {}
    for info in pkgutil.iter_modules(list(path)):
        if not info.name.startswith("_") and not info.ispkg:
            name = info.name.replace("_", "-") if dashes else info.name
            found[name] = importlib.import_module(f"{package}.{info.name}")
    first = [n for n in first if n in found]
    return {n: found[n] for n in first + sorted(n for n in found if n not in first)}
