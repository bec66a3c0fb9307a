"""The ``astral-lab`` program (also ``python -m astral_lab``): signal handling, then the CLI.

The command line imports Mininet, NumPy and the controller's modules before it can parse a
word, which takes a noticeable moment on a busy machine. Ctrl-C or SIGTERM in that moment
must still be a clean stop with the shell's status, so the handlers go in first and the
heavy imports come after them.
"""

from __future__ import annotations

import sys

from testbed.shell.signals import stop_on_signals


def main(argv: list[str] | None = None) -> int:
    """Install the stop handlers, then run ``astral_lab.cli.main``."""
    stop_on_signals()
    try:
        from astral_lab.cli import main as cli_main
    except KeyboardInterrupt:
        print("astral-lab: interrupted before it started", file=sys.stderr)
        return 130
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
