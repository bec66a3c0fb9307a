"""Every command in docs/walkthrough.md is exercised, so the classroom guide cannot rot.

Light commands (topo, cost, list) run here for real. Commands that need root and a fabric are
parsed by the real CLI (a renamed flag fails here), and each scenario they name must have an
integration test that runs it (in --quick mode; same function, same parameters otherwise).
`vagrant` and shell navigation lines are the only ones taken on trust.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

import pytest

from astral_lab import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "walkthrough.md")
TRUSTED = ("vagrant ", "cd ", "export ")


def commands() -> list[str]:
    with open(DOC) as f:
        text = f.read()
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def integration_sources() -> str:
    d = os.path.join(ROOT, "tests", "integration")
    text = ""
    for name in sorted(os.listdir(d)):
        if name.endswith(".py"):
            with open(os.path.join(d, name)) as f:
                text += f.read()
    return text


def test_the_walkthrough_has_commands() -> None:
    cmds = commands()
    assert len(cmds) > 15
    assert any(c.startswith("sudo astral-lab run ") for c in cmds)


@pytest.mark.parametrize("line", commands())
def test_command(line: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                 capsys: pytest.CaptureFixture[str]) -> None:
    if line.startswith(TRUSTED):
        return
    if line.startswith("sudo make "):
        target = line.split()[2]
        with open(os.path.join(ROOT, "Makefile")) as f:
            make = f.read()
        assert re.search(rf"^{target}:", make, flags=re.M), f"no make target {target}"
        assert f"astral-lab {target}" in make or target in ("test", "setup")
        return
    argv = shlex.split(line)
    if argv[0] == "sudo":
        argv = argv[1:]
    assert argv[0] == "astral-lab", line
    argv = argv[1:]
    verb = argv[0]
    if verb in ("topo", "cost", "list"):  # light: run it
        monkeypatch.setenv("ASTRAL_LAB_RESULTS", str(tmp_path))
        assert cli.main(argv) == 0
        assert capsys.readouterr().out.strip()
        return
    args, extra = cli.parser().parse_known_args(argv)  # flags must exist
    if verb == "run":
        from scenarios.experiments import SCENARIOS

        sc = SCENARIOS.get(args.scenario)
        cli._run_parser(args.scenario).parse_args(args.rest)
        assert f"{sc.fn.__name__}(quick=True" in integration_sources(), \
            f"no integration test runs {args.scenario}"
    elif verb == "demo":
        from scenarios.experiments.demo import demo

        demo.resolve(False, {})
        assert "demo(quick=True" in integration_sources()
    elif verb == "ops":  # tests/integration/test_ops.py drives ops_cli.main on a live lab
        assert not extra
        assert f'cli.main(["{args.ops_verb}"' in integration_sources(), \
            f"no integration test drives `astral-lab ops {args.ops_verb}`"
    else:
        pytest.fail(f"walkthrough command {line!r} is not covered by this test")
