"""Report prose kept in scenarios/templates/: the snippet format, and every snippet a report
builder names exists in its template (and every snippet there is used), so a branch no
fake run reaches cannot fail on a real fabric for a misspelt name."""

from __future__ import annotations

import ast
import pathlib
import string

import pytest

from scenarios import prose

ROOT = pathlib.Path(prose.__file__).parent


def _uses() -> dict[str, set[str]]:
    """template name -> the snippet names the modules that load it pass to ``WORDS``; a
    family named by an f-string (``WORDS(f"why_{name}")``, its builder falling back to a
    literal snippet when the template has no member for ``name``) is its prefix + ``*``."""
    out: dict[str, set[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        report, names = None, set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "of_module":  # Prose.of_module(__name__)
                report = path.stem
                continue
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            if node.func.id == "Prose" and node.args and isinstance(node.args[0], ast.Constant):
                report = node.args[0].value
            elif node.func.id == "WORDS" and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant):
                    names.add(arg.value)
                elif isinstance(arg, ast.IfExp):  # WORDS("a" if x else "b")
                    stack: list[ast.expr] = [arg]
                    while stack:
                        e = stack.pop()
                        if isinstance(e, ast.IfExp):
                            stack += [e.body, e.orelse]
                        else:
                            assert isinstance(e, ast.Constant), ast.dump(e)
                            names.add(e.value)
                elif isinstance(arg, ast.JoinedStr) and isinstance(arg.values[0], ast.Constant):
                    names.add(f"{arg.values[0].value}*")
                else:
                    raise AssertionError(f"{path}: WORDS({ast.dump(arg)}) is not a literal")
        if report:
            out.setdefault(report, set()).update(names)
    return out


def test_every_template_has_a_builder_and_every_snippet_is_used_and_exists() -> None:
    uses = _uses()
    files = {p.stem for p in (ROOT / "templates").glob("*.md")}
    assert files == set(uses)
    for report, names in uses.items():
        have = set(prose.snippets(report))
        families = tuple(n[:-1] for n in names if n.endswith("*"))
        assert names - have - {f"{f}*" for f in families} == set(), f"{report}: missing snippets"
        assert {n for n in have - names if not n.startswith(families)} == set(), \
            f"{report}: snippets no builder uses"
        for family in families:  # a family has members
            assert any(n.startswith(family) for n in have), f"{report}: no {family} snippets"


@pytest.mark.parametrize("report", sorted(p.stem for p in (ROOT / "templates").glob("*.md")))
def test_templates_parse_as_format_strings(report: str) -> None:
    for name, text in prose.snippets(report).items():
        list(string.Formatter().parse(text))  # raises on a stray brace
        assert text == text.strip() and text, name


def test_snippet_format(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "t.md").write_text(
        "a note\n\n<!-- one -->\nwrapped\n  words {x:.1f}\n\nnext {{para}}\n"
        "<!-- two keep-lines -->\nline one\nline two\n", encoding="utf-8")
    monkeypatch.setattr(prose.resources, "files", lambda _pkg: tmp_path)
    prose.snippets.cache_clear()
    try:
        assert prose.snippets("t") == {"one": "wrapped words {x:.1f}\n\nnext {{para}}",
                                        "two": "line one\nline two"}
        assert prose.Prose("t")("one", x=2) == "wrapped words 2.0\n\nnext {para}"
        with pytest.raises(KeyError, match="no snippet 'three'"):
            prose.Prose("t")("three")
        # a module's words are the template named as its file
        assert prose.Prose.of_module("scenarios.experiments.t")("one", x=3) == \
            "wrapped words 3.0\n\nnext {para}"
    finally:
        prose.snippets.cache_clear()
