"""The ``astral-lab`` program (also ``python -m astral_lab``): signal handling, then the CLI.

The command line imports Mininet, NumPy and the controller's modules before it can parse a
word, which takes a noticeable moment on a busy machine. Ctrl-C or SIGTERM in that moment
must still be a clean stop with the shell's status, so the handlers go in first and the
heavy imports come after them. Before even that, Python's own start-up cannot take a
Ctrl-C (it dies with "Fatal Python error"), so the launcher (``bin/astral-lab``) starts
the interpreter with the stopping signals blocked, and ``stop_on_signals`` unblocks them
once its handlers are in: a stop that came meanwhile is delivered then.

Even importing the handlers takes a few modules, and a Ctrl-C that lands inside an
import's module-lock callback is not raised but printed as "Exception ignored" and lost
(the command would then run on and exit 0). So before any import a tiny hook notes such a
stop, and once the handlers are in, a noted stop ends the program as the Ctrl-C would have.
A stop put off to the end of a short command (it imports to its last moment) is reported
when the command returns, with the stop's status.

A reader that closes the pipe early (``astral-lab policies --json | head -1``) does not
stop the command either: its files are still written, the rest of its output is dropped,
and the status is 141 (128 + SIGPIPE), as for any program whose reader went away.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, TextIO

_swallowed: list[BaseException] = []

#: the status of a command whose standard output was closed by its reader (128 + SIGPIPE)
EXIT_PIPE = 128 + signal.SIGPIPE


def _note_swallowed(unraisable: object) -> None:
    exc = getattr(unraisable, "exc_value", None)
    if isinstance(exc, KeyboardInterrupt | SystemExit):
        _swallowed.append(exc)
        return
    sys.__unraisablehook__(unraisable)  # type: ignore[arg-type]


sys.unraisablehook = _note_swallowed

try:  # a Ctrl-C can land in this import too, before any handler of ours is in
    from testbed.shell.signals import (  # noqa: E402  (after the hook)
        STOPPING,
        exit_status,
        pending_stop,
        stop_inside,
        stop_on_signals,
    )
except KeyboardInterrupt:
    print("astral-lab: interrupted before it started", file=sys.stderr)
    raise SystemExit(130) from None


class ReaderGone:
    """Standard output that a reader closing the pipe cannot break: the first write or
    flush that finds the pipe closed points the descriptor at /dev/null (so Python's own
    last flush cannot fail either) and drops the rest; ``gone`` says it happened."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self) -> None:
        self.gone = True
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._stream.fileno())
        finally:
            os.close(null)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _finish(status: int, argv: list[str]) -> int:
    """The command returned ``status``: flush its output, then report a stop that was put
    off while it finished (it imported to its end) with the stop's status. From here on a
    stop ends the process by the signal, as before the handlers were in."""
    sys.stdout.flush()
    for sig in STOPPING:
        signal.signal(sig, signal.SIG_DFL)
    sig = pending_stop()
    if sig is not None:
        verb = next((a for a in argv if not a.startswith("-")), "command")
        print(f"astral-lab {verb}: stopped ({signal.Signals(sig).name}) as it finished; its "
              "output above and its files are complete", file=sys.stderr)
        return exit_status(sig)
    if isinstance(sys.stdout, ReaderGone) and sys.stdout.gone and status == 0:
        return EXIT_PIPE
    return status


def main(argv: list[str] | None = None) -> int:
    """Install the stop handlers and the pipe guard, then run ``astral_lab.cli.main``."""
    try:
        stop_on_signals()
        if _swallowed:  # a stop that came while the handlers were being imported
            raise _swallowed[0]
        # lazy: the CLI loads Mininet, NumPy and more (~0.5 s): after the stop handlers
        from astral_lab.cli import main as cli_main
    except BaseException as exc:  # noqa: BLE001  (a stop, bare or wrapped; else re-raised)
        stop = stop_inside(exc)
        if stop is None:
            raise
        if isinstance(stop, SystemExit):
            raise stop from None
        print("astral-lab: interrupted before it started", file=sys.stderr)
        return 130
    if not isinstance(sys.stdout, ReaderGone):
        sys.stdout = ReaderGone(sys.stdout)  # type: ignore[assignment]
    words = sys.argv[1:] if argv is None else argv
    return _finish(cli_main(argv), words)


if __name__ == "__main__":
    sys.exit(main())
