"""The README and docs/ send readers to places that exist, with commands that parse.

1. Every relative link in README.md and docs/*.md (``[text](path)``, ``![alt](path)``)
   resolves to an existing file, and a ``#anchor`` into a markdown file (or into the page
   itself) names one of its headings, slugged as GitHub slugs them. Links inside code are
   not links and are ignored; ``http(s):`` and ``mailto:`` links are not checked.
2. Every ``astral-lab`` command line in a fenced code block is parsed by the real CLI
   parser (``astral_lab.cli.parser``, what ``main`` builds; a scenario's own options by
   ``cli._run_parser``, as ``run`` and ``demo`` parse them), without running the verb. A
   renamed verb, flag or choice, or a value its rule refuses, fails here. ``-h``/``--help``
   lines pass when the parser exits 0 after printing the help.

The rules that let a line through without parsing it as written, all stated here:

* ``PLACEHOLDER``: a line with an argument in angle brackets (``<DIR>``) or an argument
  that is ``...`` is skipped; at most ``MAX_PLACEHOLDERS`` such lines may exist.
* ``IN_FILE_OPTIONS``: the value of an option that must name an existing file (``--plan``)
  is replaced by a scratch wiring plan, since the docs' lines read a file an earlier
  command writes (and the plan doors check it as they parse).
* A pipe (``| head -1``): only the command before it is parsed.
* A ``cp examples/plugins/NAME.py DIR/`` line in a code block installs that worked example:
  the page's later command lines are parsed in a copy of the project with the plugins
  copied so far in place (as a reader following the page has them), in a fresh
  interpreter.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: an argument that is a placeholder, not a value: <DIR>, ...
PLACEHOLDER = re.compile(r"^<[^>]+>$|^\.\.\.$")
MAX_PLACEHOLDERS = 3
#: options whose value must name an existing file when parsed
IN_FILE_OPTIONS = ("--plan",)
#: what may stand before the command on a line: a shell prompt, sudo, environment
PROMPT = "$ "
PACKAGES = ("astral_lab", "benchmarks", "controllers", "ops", "scenarios", "testbed",
            "traffic", "vocab")


def docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


# ---------------------------------------------------------------- links and anchors

FENCE = re.compile(r"^(```|~~~)")


def prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (kept as blank space)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lowercased, punctuation other than
    ``-`` and ``_`` dropped, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings_anchors(path: Path) -> set[str]:
    """Anchors from the raw heading lines (inline code in a heading is part of its text)."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m[1])
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path.read_text(encoding="utf-8")))


def broken_links(path: Path) -> list[str]:
    bad = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{_rel(path)}: ({target}) -> {file_part} does not exist")
            continue
        if anchor:
            if dest.suffix != ".md" or not dest.is_file():
                bad.append(f"{_rel(path)}: ({target}) -> an anchor into a non-markdown file")
            elif anchor not in headings_anchors(dest):
                bad.append(f"{_rel(path)}: ({target}) -> {dest.name} has no heading "
                           f"#{anchor}")
    return bad


def test_the_docs_have_links() -> None:
    assert sum(len(links(p)) for p in docs()) > 40
    assert any("#" in t for p in docs() for t in links(p))


@pytest.mark.parametrize("path", docs(), ids=_rel)
def test_relative_links_resolve(path: Path) -> None:
    bad = broken_links(path)
    assert not bad, "\n".join(bad)


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    """A missing file, a missing heading and a link into code are told apart."""
    (tmp_path / "b.md").write_text("# Title\n\n## Some `code` here\n\n## Title\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#some-code-here) [ok2](b.md#title-1) [self](#a)\n\n# A\n\n"
                    "[gone](c.md) [bad anchor](b.md#nope)\n\n```\n[in code](nowhere.md)\n```\n")
    bad = broken_links(page)
    assert len(bad) == 2 and "c.md does not exist" in bad[0] and "#nope" in bad[1]


# ---------------------------------------------------------------- command lines

def code_lines(path: Path) -> list[list[str]]:
    """Each fenced code block's logical lines (``\\`` continuations joined)."""
    blocks, block, fenced = [], [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            if fenced:
                blocks.append(block)
                block = []
            fenced = not fenced
            continue
        if not fenced:
            continue
        if block and block[-1].endswith("\\"):
            block[-1] = block[-1][:-1] + " " + line.strip()
        else:
            block.append(line)
    return blocks


def command(line: str) -> list[str] | None:
    """The argv after ``astral-lab`` on a command line, or None if the line runs something
    else. A shell prompt, ``sudo``, ``env`` and VAR=value assignments may come first; a
    trailing ``  # comment`` and ``&`` are not part of the command."""
    line = line.strip()
    line = line.removeprefix(PROMPT)
    line = re.split(r"\s+#(?:\s|$)", line, maxsplit=1)[0].strip()
    if not line or line.startswith("#"):
        return None
    try:
        words = shlex.split(line)
    except ValueError:
        return None
    if "|" in words:  # what a pipe feeds is another command
        words = words[:words.index("|")]
    if words and words[-1] == "&":
        words = words[:-1]
    while words and (words[0] in ("sudo", "env", "-E")
                     or re.match(r"^[A-Z_][A-Z0-9_]*=", words[0])):
        words = words[1:]
    if not words or not (words[0] == "astral-lab" or words[0].endswith("/astral-lab")):
        return None
    return words[1:]


def doc_commands() -> list[tuple[str, list[str], tuple[str, ...]]]:
    """(where, argv, plugins installed so far on that page) for every command line."""
    out = []
    for path in docs():
        plugins: list[str] = []
        for block in code_lines(path):
            for line in block:
                cp = re.match(r"^\s*cp\s+(examples/plugins/\w+\.py)\s+(\S+?)/?\s*(#.*)?$", line)
                if cp:
                    assert (REPO / cp[1]).is_file(), f"{_rel(path)}: {cp[1]} does not exist"
                    assert (REPO / cp[2]).is_dir(), f"{_rel(path)}: {cp[2]} is not a folder"
                    plugins.append(f"{cp[1]}:{cp[2]}")
                    continue
                argv = command(line)
                if argv is not None:
                    out.append((f"{_rel(path)}: {line.strip()}", argv, tuple(plugins)))
    return out


def placeholders(argv: list[str]) -> bool:
    return any(PLACEHOLDER.match(a) for a in argv)


def with_scratch_files(argv: list[str], scratch: Path) -> list[str]:
    """``argv`` with the values of ``IN_FILE_OPTIONS`` replaced by an existing wiring plan
    (the plan doors read and check it as they parse)."""
    from testbed.topologies import build

    out = list(argv)
    for i, a in enumerate(out):
        for opt in IN_FILE_OPTIONS:
            if a == opt and i + 1 < len(out) or a.startswith(opt + "="):
                f = scratch / f"in-{i}.json"
                build("astral3", servers=2, gpus=2).save(f)
                if a == opt:
                    out[i + 1] = str(f)
                else:
                    out[i] = f"{opt}={f}"
    return out


def parse(argv: list[str]) -> str:
    """'' if the CLI parses ``argv`` (help printed and exit 0 counts), else why not."""
    from astral_lab import cli

    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            p = cli.parser()
            args, extra = p.parse_known_args(argv)
            if args.verb == "demo":
                cli._run_parser("demo").parse_args(extra)
            elif extra:
                return f"unrecognized arguments: {' '.join(extra)}"
            if args.verb == "run":
                cli._run_parser(args.scenario).parse_args(args.rest)
    except SystemExit as exc:
        if exc.code in (0, None):
            return ""
        return err.getvalue().strip() or f"exit {exc.code}"
    except ValueError as exc:  # an unknown scenario name
        return str(exc)
    return ""


COMMANDS = doc_commands()


def test_the_docs_have_commands() -> None:
    assert len(COMMANDS) > 60
    assert sum(1 for _w, a, _p in COMMANDS if placeholders(a)) <= MAX_PLACEHOLDERS


@pytest.mark.parametrize("where, argv", [(w, a) for w, a, p in COMMANDS if not p],
                         ids=[w for w, _a, p in COMMANDS if not p])
def test_command_parses(where: str, argv: list[str], tmp_path: Path,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    if placeholders(argv):
        pytest.skip("placeholder argument (PLACEHOLDER rule)")
    monkeypatch.chdir(tmp_path)  # relative output paths are checked here
    why = parse(with_scratch_files(argv, tmp_path))
    assert not why, f"{where}\n  -> {why}"


def copy_with(plugins: tuple[str, ...], dest: Path) -> Path:
    """The project's packages under ``dest``, with each ``src:folder`` plugin copied in."""
    for pkg in PACKAGES:
        if (REPO / pkg).is_dir():
            shutil.copytree(REPO / pkg, dest / pkg, ignore=shutil.ignore_patterns("*.pyc"))
    for spec in plugins:
        src, folder = spec.split(":")
        shutil.copy(REPO / src, dest / folder / Path(src).name)
    return dest


def test_commands_after_a_plugin_is_copied_parse(tmp_path: Path) -> None:
    groups: dict[tuple[str, ...], list[tuple[str, list[str]]]] = {}
    for where, argv, plugins in COMMANDS:
        if plugins and not placeholders(argv):
            groups.setdefault(plugins, []).append((where, argv))
    assert groups, "no page copies a worked example into place any more"
    bad = []
    for n, (plugins, cmds) in enumerate(groups.items()):
        root = copy_with(plugins, tmp_path / f"copy{n}")
        scratch = tmp_path / f"scratch{n}"
        scratch.mkdir()
        argvs = [with_scratch_files(a, scratch) for _w, a in cmds]
        out = subprocess.run([sys.executable, __file__, json.dumps(argvs)], cwd=scratch,
                             capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(root)})
        assert out.returncode == 0, out.stderr
        for (where, _a), why in zip(cmds, json.loads(out.stdout), strict=True):
            if why:
                bad.append(f"{where}\n  -> {why}")
    assert not bad, "\n".join(bad)


def test_the_command_check_can_fail() -> None:
    assert parse(["topo", "astral3", "--servers", "8"]) == ""
    assert parse(["run", "lb-compare", "--help"]) == ""
    assert "--no-such-flag" in parse(["topo", "astral3", "--no-such-flag"])
    assert parse(["topo", "astral3", "--scale", "nan"])
    assert parse(["run", "lb-compare", "--modes", "nosuchmode"])
    assert parse(["demo", "--quick", "--bogus"])
    assert parse(["frobnicate"])
    assert command("sudo env PATH=$PATH astral-lab up astral3  # c") == ["up", "astral3"]
    assert command("LAB_WORKERS=2 vagrant up") is None
    assert command("$ sudo .venv/bin/astral-lab list") == ["list"]


def _main(argvs: list[list[str]]) -> list[str]:
    return [parse(a) for a in argvs]


if __name__ == "__main__":  # the plugin check: parse in this interpreter, print the verdicts
    print(json.dumps(_main(json.loads(sys.argv[1]))))
