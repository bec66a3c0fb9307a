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
import difflib
import errno
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn


class BadValue(ValueError, argparse.ArgumentTypeError):
    """A value that breaks its rule; the message names the option and the rule."""


class _Once(argparse._StoreAction):
    """argparse's ``store``, refusing an option given twice: with "last wins" a repeated
    option silently drops the value the user typed first."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        given = namespace.__dict__.setdefault(_GIVEN, set())
        if option_string is not None and self.dest in given:
            raise argparse.ArgumentError(self, "given twice; give it once")
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


#: where ``_Once`` notes the options given, in the namespace while it is parsed
_GIVEN = "_astral_lab_given"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``PROG: error: MESSAGE``), exit 2.

    argparse's default prints the whole usage first; the lab's convention is one line per
    mistake on stderr (``--help`` shows the usage). Subparsers inherit the class. No
    prefix abbreviations (``--scal`` for ``--scale`` would change meaning the day an option
    with that prefix is added), and a single-value option given twice is refused.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        # "-1e-4" and "-inf" are values (refused by their option's rule), not options:
        # argparse's own pattern knows only -1 and -1.5
        self._negative_number_matcher = re.compile(
            r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)
        self.register("action", None, _Once)
        self.register("action", "store", _Once)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extra = super().parse_known_args(args, namespace)
        parsed.__dict__.pop(_GIVEN, None)
        return parsed, extra

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """argparse's own check of ``choices``, answering a mistyped verb, design or
        option value with the closest choice (``did you mean``)."""
        if action.choices is not None and value not in action.choices:
            names = [str(c) for c in action.choices]
            close = difflib.get_close_matches(str(value), names, n=1, cutoff=0.6)
            listed = f"choose from {', '.join(names)}"
            hint = f"did you mean {close[0]}? ({listed})" if close else listed
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}; {hint}")


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
#: seconds of a poll, a timer, a run: a millisecond to a day (less than a millisecond is
#: a typo, and 1e-300 s would spin a poll loop)
SECONDS = real(1e-3, 86400)
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
            raise not_one_of(part, choices, label)
        if check is not None:
            try:
                check(part)
            except ValueError as exc:
                raise BadValue(f"{label}{exc}") from None
        if part in out:
            raise BadValue(f"{label}{part!r} is listed twice")
        out.append(part)
    return out


def not_one_of(value: Any, choices: Sequence[Any], label: str = "") -> BadValue:
    """The error for a value none of ``choices`` is: every choice, and the closest one when
    one is close (``did you mean``), so a mistyped name is answered with the name meant."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    return BadValue(f"{label}{value!r} is not one of {', '.join(map(str, choices))}{hint}")


def list_of(*, rule: Rule | None = None, choices: Sequence[Any] | None = None,
            check: Callable[[Any], Any] | None = None) -> Callable[[str], list[Any]]:
    """``items`` as an argparse ``type`` (argparse names the option)."""
    def parse(text: str) -> list[Any]:
        return items(text, rule=rule, choices=choices, check=check)
    parse.__name__ = "list"
    return parse


# --- output paths ----------------------------------------------------------------------
#: Linux's limits on a path (bytes): one name, and the whole path (PATH_MAX counts the NUL)
NAME_MAX, PATH_MAX = 255, 4096
#: room left, past a results root, for the folder and the files the lab makes in it
RESULTS_ROOM = 128


def _kind(mode: int) -> str:
    """What a file that is not a regular one is, in a user's words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _too_long(path: str, room: int = 0) -> str:
    """Why ``path`` (plus ``room`` bytes the lab adds below it) is longer than Linux takes,
    or "". Checked before any work: the kernel refuses such a name only when a file is
    made, which is after the work is done."""
    raw = os.fsencode(os.path.abspath(path))
    for part in raw.split(b"/"):
        if len(part) > NAME_MAX:
            shown = os.fsdecode(part[:24])
            return (f"the name {shown}... is {len(part)} bytes long; a name takes at most "
                    f"{NAME_MAX}")
    if len(raw) + room >= PATH_MAX:
        more = f" (and {room} for what the lab makes in it)" if room else ""
        return (f"the path is {len(raw)} bytes long{more}; a path takes at most "
                f"{PATH_MAX - 1}")
    return ""


def special_file(path: str) -> str:
    """Why an existing ``path`` must not be replaced by a written file, or "" when it may
    (it does not exist, or is a regular file, or a symlink to one in the same folder).

    Writers replace their file whole (a temporary file renamed over it), which would turn
    a device node, FIFO or socket into a plain file, and running as root that could be
    ``/dev/null``; a symlink leading out of its folder says the file lives elsewhere."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return ""  # a new file (a folder on its way that is not one is _creatable's)
    except OSError as exc:
        return f"cannot be looked at ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        target = os.path.realpath(path)
        folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
        if os.path.dirname(target) != folder:
            return f"is a symlink out of its folder (to {target})"
        try:
            st = os.stat(path)
        except OSError:
            return ""  # a dangling link inside the folder: the file is new
    if stat.S_ISREG(st.st_mode):
        return ""
    return f"is {_kind(st.st_mode)}, not a regular file"


def replaceable(path: str | os.PathLike[str], name: str = "") -> None:
    """Refuse (BadValue) to write ``path`` when ``special_file`` says it is not a file
    to replace; the last check of every writer, after the doors' own."""
    why = special_file(os.fspath(path))
    if why:
        label = f"{name} " if name else ""
        raise BadValue(f"{label}{os.fspath(path)} {why}; give a new or regular file")


def _creatable(path: str, room: int = 0) -> str:
    """The reason files cannot be made at ``path`` (a folder that exists or would be made
    with its parents), or "" when they can. Tried for real, with an unnamed temporary file
    where the filesystem has them: permissions say nothing for root, and /proc or a
    read-only mount refuse only when asked."""
    long = _too_long(path, room)
    if long:
        return long
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


def out_dir(path: str, name: str = "", files: Sequence[str] | None = (),
            room: int = 0) -> str:
    """A folder results can be written into: an existing writable folder, or one that can
    be made (its nearest existing parent is a writable folder). ``files``: the names the
    verb writes in it, each checked as ``out_file`` checks a file (None: every entry the
    folder already holds, for a verb whose file names are not known in advance); ``room``:
    bytes of names the verb adds below it. Nothing is created. Also an argparse ``type``
    (argparse names the option)."""
    label = f"{name} " if name else ""
    if not str(path).strip():
        raise BadValue(f"{label}needs a folder name")
    if os.path.lexists(path) and not os.path.isdir(path):
        st = os.lstat(path)
        what = "exists and is not a folder" if stat.S_ISREG(st.st_mode) or \
            stat.S_ISLNK(st.st_mode) else f"is {_kind(st.st_mode)}, not a folder"
        raise BadValue(f"{label}{path} {what} (give a folder for the results)")
    why = _creatable(path, room)
    if why:
        raise BadValue(f"{label}{path} is not a writable folder ({why})")
    if os.path.isdir(path):
        names = sorted(os.listdir(path)) if files is None else list(files)
        for entry in names:
            inside = os.path.join(path, entry)
            if files is None and os.path.isdir(inside) and not os.path.islink(inside):
                continue
            bad = special_file(inside)
            if bad:
                raise BadValue(f"{label}{inside} {bad}; the results would replace it "
                               "(give another folder)")
    return str(path)


def out_file(path: str, name: str = "") -> str:
    """A file that can be written: new, or a regular file (``special_file``), not a folder,
    in a folder that exists or can be made, with a name Linux takes."""
    label = f"{name} " if name else ""
    if not str(path).strip():
        raise BadValue(f"{label}needs a file name")
    if str(path).endswith(os.sep) or os.path.isdir(path):
        raise BadValue(f"{label}{path} is a folder; give a file name (e.g. "
                       f"{os.path.join(path, 'plan.json')})")
    long = _too_long(path)
    if long:
        raise BadValue(f"{label}{path[:60]}... cannot be written ({long})")
    why = special_file(path)
    if why:
        raise BadValue(f"{label}{path} {why}; give a new or regular file")
    why = _creatable(os.path.dirname(os.path.abspath(path)))
    if why:
        raise BadValue(f"{label}{path} cannot be written ({why})")
    return str(path)


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file (after symlinks; neither need exist)."""
    return os.path.realpath(a) == os.path.realpath(b)


def distinct(paths: dict[str, str]) -> None:
    """Refuse (BadValue) two of a command's files that are one: an output written over
    another, or over an input it reads. ``paths``: what each is (``-o``) -> its path."""
    seen: list[tuple[str, str]] = []
    for what, path in paths.items():
        for other, earlier in seen:
            if same_file(path, earlier):
                raise BadValue(f"{other} and {what} name the same file ({path}); give "
                               "each its own")
        seen.append((what, path))


def in_file(path: str, name: str = "") -> str:
    """A file to read (a plan, a telemetry file): it exists, is a regular file and opens
    (a FIFO or a device would block or never end, so neither is opened). Also an argparse
    ``type``."""
    label = f"{name} " if name else ""
    if not str(path).strip():
        raise BadValue(f"{label}needs a file name")
    long = _too_long(path)
    if long:
        raise BadValue(f"{label}{path[:60]}...: no such file ({long})")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise BadValue(f"{label}{path}: no such file") from None
    except OSError as exc:
        raise BadValue(f"{label}{path}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise BadValue(f"{label}{path}: is {_kind(st.st_mode)}, not a regular file")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise BadValue(f"{label}{path}: cannot be read ({exc.strerror})") from None
    return str(path)


__all__ = ["NAME_MAX", "PATH_MAX", "PORT", "RESULTS_ROOM", "SECONDS", "SEED", "BadValue",
           "Parser", "Rule", "count", "distinct", "in_file", "items", "list_of", "out_dir",
           "out_file", "positive", "real", "replaceable", "same_file", "special_file"]
