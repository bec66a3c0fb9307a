"""The ``astral-lab`` program (also ``python -m astral_lab``): signal handling, then the CLI.

The command line imports Mininet, NumPy and the controller's modules before it can parse a
word, which takes a noticeable moment on a busy machine. Ctrl-C or SIGTERM in that moment
must still be a clean stop with the shell's status, so the handlers go in first and the
heavy imports come after them.

Even importing the handlers takes a few modules, and a Ctrl-C that lands inside an
import's module-lock callback is not raised but printed as "Exception ignored" and lost
(the command would then run on and exit 0). So before any import a tiny hook notes such a
stop, and once the handlers are in, a noted stop ends the program as the Ctrl-C would have.
"""

from __future__ import annotations

import sys

_swallowed: list[BaseException] = []


def _note_swallowed(unraisable: object) -> None:
    exc = getattr(unraisable, "exc_value", None)
    if isinstance(exc, KeyboardInterrupt | SystemExit):
        _swallowed.append(exc)
        return
    sys.__unraisablehook__(unraisable)  # type: ignore[arg-type]


sys.unraisablehook = _note_swallowed

try:  # a Ctrl-C can land in this import too, before any handler of ours is in
    from testbed.shell.signals import stop_inside, stop_on_signals  # noqa: E402  (after the hook)
except KeyboardInterrupt:
    print("astral-lab: interrupted before it started", file=sys.stderr)
    raise SystemExit(130) from None


def main(argv: list[str] | None = None) -> int:
    """Install the stop handlers, then run ``astral_lab.cli.main``."""
    try:
        stop_on_signals()
        if _swallowed:  # a stop that came while the handlers were being imported
            raise _swallowed[0]
        from astral_lab.cli import main as cli_main
    except BaseException as exc:  # noqa: BLE001  (a stop, bare or wrapped; else re-raised)
        stop = stop_inside(exc)
        if stop is None:
            raise
        if isinstance(stop, SystemExit):
            raise stop from None
        print("astral-lab: interrupted before it started", file=sys.stderr)
        return 130
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
