"""The live view in a real browser: headless Chromium against the server with a fake backend.

Skipped (saying why) where Chromium is not installed; ``scripts/setup.sh`` installs it.
"""

from __future__ import annotations

import glob
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ops.shell.dashboard_server import DashboardServer
from tests.unit.browser import Browser, chromium_path
from tests.unit.dash_fakes import FakeBackend

pytestmark = pytest.mark.skipif(
    chromium_path() is None,
    reason="chromium not installed (apt-get install chromium; scripts/setup.sh installs it)")

LINK = "lf0r0~spine1#0"


@pytest.fixture
def page() -> Iterator[tuple[Browser, FakeBackend]]:
    backend = FakeBackend(load=0.05)
    with DashboardServer(backend, 0) as srv, Browser(srv.url) as browser:
        browser.wait_for("document.body.dataset.ready === '1'", timeout=30)
        yield browser, backend


def test_every_plan_link_is_drawn_once_with_its_data(page: Any) -> None:
    browser, backend = page
    links = browser.links()
    assert sorted(links) == sorted(backend.st.links)
    assert all(v["state"] == "up" and v["util"] for v in links.values())
    assert browser.evaluate("document.querySelectorAll('[data-node]').length") == \
        len(backend.plan.nodes)
    assert browser.evaluate("document.querySelectorAll('#spines tr').length") == 4


def test_a_links_colour_follows_the_load_within_3_s(page: Any, tmp_path: Any) -> None:
    browser, backend = page
    before = browser.links()[LINK]
    backend.load = 0.95
    t0 = time.monotonic()
    after = browser.wait_for(
        f"(e => e.dataset.color !== '{before['color']}' && "
        "{color: e.dataset.color, util: e.dataset.util})"
        f"(document.querySelector('[data-link=\"{LINK}\"]'))", timeout=3.0)
    assert time.monotonic() - t0 <= 3.0
    assert float(after["util"]) == pytest.approx(0.95)
    assert after["color"] == browser.links()[LINK]["stroke"]  # what is drawn, not only data
    backend.down.add(LINK)
    browser.wait_for(f"document.querySelector('[data-link=\"{LINK}\"]').dataset.state "
                     "=== 'down'", timeout=3.0)
    assert browser.screenshot(str(tmp_path / "page.png"))


def test_an_evaluations_faults_are_listed_and_marked_on_the_drawing(page: Any) -> None:
    browser, backend = page
    assert browser.evaluate("document.getElementById('faults-panel').hidden")  # no evaluation
    backend.st.progress = {"scenario": "ops-eval", "stage": "fault phase", "faults": [
        {"kind": "gray-loss", "component": LINK, "since": backend.t - 3},
        {"kind": "hot-receiver", "component": "s1g1", "since": backend.t}]}
    browser.wait_for("!document.getElementById('faults-panel').hidden", timeout=3.0)
    items = browser.evaluate("[...document.querySelectorAll('#faults li')]"
                             ".map(li => li.textContent)")
    assert items[0].startswith(f"gray-loss on {LINK} for ") and items[1].startswith(
        "hot-receiver on s1g1"), items
    marked = browser.evaluate("[...document.querySelectorAll('.faulty')]"
                              ".map(e => e.dataset.link || e.dataset.node).sort()")
    assert marked == sorted([LINK, "s1g1"])
    backend.st.progress = {**backend.st.progress, "faults": []}  # both undone
    browser.wait_for("document.querySelectorAll('.faulty').length === 0", timeout=3.0)
    assert browser.evaluate("document.querySelector('#faults li').className") == "none"


def test_the_lb_selector_switches_the_mode(page: Any) -> None:
    browser, backend = page
    browser.wait_for("!document.getElementById('lb-mode').disabled", timeout=5)
    browser.evaluate("(s => { s.value = 'planned'; s.dispatchEvent(new Event('change')); })"
                     "(document.getElementById('lb-mode'))")
    browser.wait_for("document.getElementById('lb-message').textContent === 'now planned'",
                     timeout=5)
    assert backend.lb_calls == [{"mode": "planned"}]


def test_the_browser_leaves_nothing_in_the_temporary_folder() -> None:
    """Chromium puts its singleton lock folder in TMPDIR; the test browser's must go with
    its profile, or every run of the suite leaves one behind."""
    pattern = os.path.join(tempfile.gettempdir(), "org.chromium.*")
    before = set(glob.glob(pattern))
    backend = FakeBackend(load=0.05)
    with DashboardServer(backend, 0) as srv, Browser(srv.url) as browser:
        browser.wait_for("document.body.dataset.ready === '1'", timeout=30)
        profile = browser.profile
    assert set(glob.glob(pattern)) - before == set()
    assert not os.path.exists(profile)
