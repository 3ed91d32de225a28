"""Headless Chromium for looking at tessera's HTML reports as a user would.

    with headless_chromium() as browser:
        browser.get(Path("report.html").resolve().as_uri())
        assert console_errors(browser) == []
        width, height = graph_size(browser)

Chromium and its driver come from Debian (`chromium`, `chromium-driver`,
installed by scripts/setup.sh); `selenium` from the test extra. The driver
is given by path, so Selenium never tries to download one.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from typing import Any

SETUP_HINT = "run scripts/setup.sh (it installs the Debian packages chromium and chromium-driver)"
# Chromium runs as root in CI containers: no sandbox, no GPU, no small /dev/shm.
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage")


class BrowserMissing(RuntimeError):
    pass


def _find(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise BrowserMissing(f"{' or '.join(names)} is not installed: {SETUP_HINT}")


@contextlib.contextmanager
def headless_chromium(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A Selenium WebDriver on headless Chromium that keeps the page's console log."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as err:
        raise BrowserMissing(f"the selenium package is missing ({err}): install the test extra, "
                             f"pip install -e '.[test]', or {SETUP_HINT}") from None
    options = webdriver.ChromeOptions()
    options.binary_location = _find("chromium", "chromium-browser")
    for flag in (*CHROMIUM_FLAGS, f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=_find("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[str]:
    """The page's console messages of level SEVERE (errors, failed loads)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def graph_size(driver: Any) -> tuple[float, float]:
    """Width and height of the report's graph as Graphviz drew it (its SVG viewBox, before any zoom)."""
    size = driver.execute_script(
        "var box = document.querySelector('#viewport svg').viewBox.baseVal; return [box.width, box.height];")
    return float(size[0]), float(size[1])


def graph_text(driver: Any) -> str:
    """All the text of the report's graph."""
    return str(driver.execute_script("return document.querySelector('#viewport svg').textContent;"))
