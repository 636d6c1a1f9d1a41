"""Headless Chromium driven by Playwright: Debian's ``/usr/bin/chromium`` (no browser is
downloaded), a fresh profile, pages of the Dagster UI opened and kept as screenshots.

Screenshots go to ``$JOULEHOUSE_E2E_ARTEFACTS`` when set, else to a folder under the
pytest tmp dir (the test prints where).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
ARTEFACTS_ENV = "JOULEHOUSE_E2E_ARTEFACTS"
#: Chromium's flags for a root user in a sandboxless container, nothing fetched on its own
#: (Playwright adds ``--headless`` and its own automation flags).
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
#: Bounds, not timings: the UI loads its JavaScript, then asks GraphQL.
PAGE_TIMEOUT_MS = 90_000
VIEWPORT = {"width": 1600, "height": 1000}
#: How long the graph takes to draw the nodes a pan brought on screen (a bound), and how
#: often the page's text is read meanwhile (the wait ends once every name is seen).
PAN_SETTLE_MS = 700
SETTLE_POLL_MS = 100


def missing_requirement() -> str | None:
    """Why no browser can be driven here, or None when one can."""
    if not CHROMIUM.is_file():
        return f"{CHROMIUM} not found (Debian's chromium package)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright (Python) not installed: pip install -e '.[dev]'"
    return None


@dataclass
class Browser:
    """One page of a headless Chromium on the UI at ``base_url``; ``shot`` keeps what it
    shows as ``<artefacts>/<name>.png``."""

    page: object  # playwright.sync_api.Page
    base_url: str
    artefacts: Path

    def open(self, path: str, wait_for_text: str) -> None:
        """Open ``path`` of the UI and wait until ``wait_for_text`` is shown."""
        self.page.goto(self.base_url + path, timeout=PAGE_TIMEOUT_MS)
        self.page.get_by_text(wait_for_text, exact=False).first.wait_for(
            timeout=PAGE_TIMEOUT_MS)

    def graph_names(self, names: list[str], steps: int = 8) -> set[str]:
        """The ``names`` the asset graph on the page draws while it is panned (it draws only
        the nodes on screen, and a tall graph does not fit even zoomed out): from where it
        opened, up to ``steps`` half screens up, then as many down, as the mouse wheel
        pans it; at each place the page's text is read until every name was seen or
        ``PAN_SETTLE_MS`` passed."""
        self.page.mouse.move(VIEWPORT["width"] // 2, VIEWPORT["height"] // 2)
        half = VIEWPORT["height"] // 2
        seen: set[str] = set()
        for direction in (-1, 1):
            for step in range(steps + 1):
                for _ in range(PAN_SETTLE_MS // SETTLE_POLL_MS):
                    self.page.wait_for_timeout(SETTLE_POLL_MS)
                    shown = self.text()
                    seen |= {name for name in names if name in shown}
                    if seen == set(names):
                        return seen
                self.page.mouse.wheel(0, direction * half)
            if direction == -1:  # back to where it opened
                self.page.mouse.wheel(0, (steps + 1) * half)
        return seen

    def text(self) -> str:
        """The text of the page as shown (``innerText`` of the body)."""
        return self.page.inner_text("body")

    def shot(self, name: str) -> Path:
        """The page as shown once nothing on it says "Loading..." any more."""
        from playwright.sync_api import expect

        expect(self.page.get_by_text("Loading...")).to_have_count(0, timeout=PAGE_TIMEOUT_MS)
        path = self.artefacts / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@contextmanager
def chromium(base_url: str, artefacts: Path, profile: Path) -> Iterator[Browser]:
    """A headless Chromium with a fresh profile in ``profile``, closed on the way out."""
    from playwright.sync_api import sync_playwright

    artefacts.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True, args=FLAGS,
            viewport=VIEWPORT)
        try:
            context.set_default_timeout(PAGE_TIMEOUT_MS)
            yield Browser(context.pages[0] if context.pages else context.new_page(),
                          base_url, artefacts)
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)
