"""One validation layer: the rules every number, list and output path a user gives must meet.

A value reaches the lab through many doors (a verb's flag, a scenario's ``--param``, a
policy's ``name:key=value``, a notebook calling a scenario, a plan file), and a bad one
(NaN, a negative count, a folder that cannot be written) must be refused at the door, once,
with one line that names the option and the rule, before anything is computed or written.
So the rules live here, in one vocabulary module every layer may import, and each door
asks the same rule: ``Rule.check`` for library callers, the ``Rule`` itself as an argparse
``type``. ``BadValue`` is both a ValueError (how every layer refuses bad input; the CLI exits
2) and an ``argparse.ArgumentTypeError`` (so argparse prints its message as written).
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn


class BadValue(ValueError, argparse.ArgumentTypeError):
    """A value that breaks its rule; the message names the option and the rule."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``PROG: error: MESSAGE``), exit 2.

    argparse's default prints the whole usage first; the lab's convention is one line per
    mistake on stderr (``--help`` shows the usage). Subparsers inherit the class.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


@dataclass(frozen=True)
class Rule:
    """A number's rule: finite, within ``low``/``high`` (open ends say so), whole if it
    counts things. Callable on text, so it is its own argparse ``type``."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False  # True: low itself is refused (x > low)
    high_open: bool = False  # True: high itself is refused (x < high)
    whole: bool = False  # counts things: an integer

    def __str__(self) -> str:
        kind = "a whole number" if self.whole else "a finite number"
        lo, hi = self.low, self.high
        if self.whole and lo is not None and hi is not None:
            lo_i = int(lo) + (1 if self.low_open else 0)
            hi_i = int(hi) - (1 if self.high_open else 0)
            return f"{kind} in {_num(lo_i)}..{_num(hi_i)}"
        if lo is not None and hi is not None:
            return (f"{kind} in {'(' if self.low_open else '['}{_num(lo)}, "
                    f"{_num(hi)}{')' if self.high_open else ']'}")
        if lo is not None:
            return f"{kind} {'>' if self.low_open else '>='} {_num(lo)}"
        if hi is not None:
            return f"{kind} {'<' if self.high_open else '<='} {_num(hi)}"
        return kind

    def check(self, value: Any, name: str = "") -> Any:
        """``value`` (a number, or text) as an int (``whole``) or float; BadValue naming
        ``name`` otherwise."""
        def bad() -> NoReturn:
            raise BadValue(f"{name + ' ' if name else ''}must be {self} (got {value!r})")

        if isinstance(value, bool):
            bad()
        if isinstance(value, str):
            text = value.strip().replace("_", "")
            try:
                num: float = int(text)
            except ValueError:
                try:
                    num = float(text)
                except ValueError:
                    bad()
        elif isinstance(value, (int, float)):
            num = value
        else:
            try:  # NumPy scalars and the like
                num = float(value)
            except (TypeError, ValueError):
                bad()
        if isinstance(num, float) and not math.isfinite(num):
            bad()
        if self.whole:
            if isinstance(num, float):
                if not num.is_integer():
                    bad()
                num = int(num)
        elif isinstance(num, int):
            num = float(num)
        if self.low is not None and (num < self.low or (self.low_open and num == self.low)):
            bad()
        if self.high is not None and (num > self.high or (self.high_open and num == self.high)):
            bad()
        return num

    def __call__(self, text: str) -> Any:
        return self.check(text)


def count(low: int = 1, high: int | None = None) -> Rule:
    """A whole number of things in ``low..high``."""
    return Rule(low, high, whole=True)


def real(low: float | None = None, high: float | None = None, *, low_open: bool = False,
         high_open: bool = False) -> Rule:
    """A finite number in the range (closed ends unless ``*_open``)."""
    return Rule(low, high, low_open=low_open, high_open=high_open)


def positive(high: float | None = None) -> Rule:
    """A finite number > 0 (and <= ``high``)."""
    return Rule(0, high, low_open=True)


#: a TCP/UDP port to listen on or connect to (0, "any free port", only where a verb says so)
PORT = count(1, 65535)
#: seconds of a poll, a timer, a run: positive, at most a day
SECONDS = positive(86400)
#: a random seed: what NumPy's generators take
SEED = count(0, 2 ** 32 - 1)


def items(value: str | Iterable[Any], name: str = "", *, rule: Rule | None = None,
          choices: Sequence[Any] | None = None,
          check: Callable[[Any], Any] | None = None) -> list[Any]:
    """A comma-separated list (or a list): no empty item, nothing twice, each item a
    ``rule`` number, one of ``choices``, or accepted by ``check`` (which raises ValueError
    for a bad one). Messages start with ``name`` when given (argparse adds its own)."""
    label = f"{name}: " if name else ""
    parts = [x.strip() for x in value.split(",")] if isinstance(value, str) else list(value)
    if not parts or parts == [""]:
        raise BadValue(f"{label}needs at least one item (got {value!r})")
    out: list[Any] = []
    for part in parts:
        if isinstance(part, str) and not part:
            raise BadValue(f"{label}empty item in {value!r} (separate items by single commas)")
        if rule is not None:
            part = rule.check(part, f"{label}each item")
        if choices is not None and part not in choices:
            raise BadValue(f"{label}{part!r} is not one of {', '.join(map(str, choices))}")
        if check is not None:
            try:
                check(part)
            except ValueError as exc:
                raise BadValue(f"{label}{exc}") from None
        if part in out:
            raise BadValue(f"{label}{part!r} is listed twice")
        out.append(part)
    return out


def list_of(*, rule: Rule | None = None, choices: Sequence[Any] | None = None,
            check: Callable[[Any], Any] | None = None) -> Callable[[str], list[Any]]:
    """``items`` as an argparse ``type`` (argparse names the option)."""
    def parse(text: str) -> list[Any]:
        return items(text, rule=rule, choices=choices, check=check)
    parse.__name__ = "list"
    return parse


# --- output paths ----------------------------------------------------------------------
def _creatable(path: str) -> str:
    """The reason files cannot be made at ``path`` (a folder that exists or would be made
    with its parents), or "" when they can. Tried for real, with an unnamed temporary file
    where the filesystem has them: permissions say nothing for root, and /proc or a
    read-only mount refuse only when asked."""
    here = os.path.abspath(path)
    while not os.path.lexists(here):
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    if not os.path.isdir(here):
        return f"{here} is not a folder"
    try:
        fd = os.open(here, os.O_TMPFILE | os.O_WRONLY, 0o600)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            return f"cannot write in {here}: {exc.strerror}"
        try:
            fd, tmp = tempfile.mkstemp(prefix=".astral-lab-check-", dir=here)
        except OSError as exc2:
            return f"cannot write in {here}: {exc2.strerror}"
        os.unlink(tmp)
    os.close(fd)
    return ""


def out_dir(path: str, name: str = "") -> str:
    """A folder results can be written into: an existing writable folder, or one that can
    be made (its nearest existing parent is a writable folder). Nothing is created. Also an
    argparse ``type`` (argparse names the option)."""
    label = f"{name} " if name else ""
    if not str(path).strip():
        raise BadValue(f"{label}needs a folder name")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise BadValue(f"{label}{path} exists and is not a folder (give a folder for the "
                       "results)")
    why = _creatable(path)
    if why:
        raise BadValue(f"{label}{path} is not a writable folder ({why})")
    return str(path)


def out_file(path: str, name: str = "") -> str:
    """A file that can be written: not a folder, in a folder that exists or can be made."""
    label = f"{name} " if name else ""
    if not str(path).strip():
        raise BadValue(f"{label}needs a file name")
    if str(path).endswith(os.sep) or os.path.isdir(path):
        raise BadValue(f"{label}{path} is a folder; give a file name (e.g. "
                       f"{os.path.join(path, 'plan.json')})")
    why = _creatable(os.path.dirname(os.path.abspath(path)))
    if why:
        raise BadValue(f"{label}{path} cannot be written ({why})")
    return str(path)


def in_file(path: str, name: str = "") -> str:
    """A file to read (a plan, a telemetry file): it exists, is a file and opens. Also an
    argparse ``type``."""
    label = f"{name} " if name else ""
    if not str(path).strip():
        raise BadValue(f"{label}needs a file name")
    if not os.path.isfile(path):
        raise BadValue(f"{label}{path}: " + ("is a folder, not a file" if os.path.isdir(path)
                                               else "no such file"))
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise BadValue(f"{label}{path}: cannot be read ({exc.strerror})") from None
    return str(path)


__all__ = ["PORT", "SECONDS", "SEED", "BadValue", "Parser", "Rule", "count", "in_file",
           "items", "list_of", "out_dir", "out_file", "positive", "real"]
