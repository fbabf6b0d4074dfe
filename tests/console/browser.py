"""A headless Chromium for the console tests: Debian's ``chromium`` driven by Selenium through
Debian's ``chromium-driver`` (``/usr/bin/chromedriver``; Selenium never downloads one),
with a fresh profile and no background network. ``browser_missing_reason`` says why a
test must skip where they are not installed."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DOCS = Path(__file__).resolve().parents[2] / "docs"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage")


def browser_missing_reason() -> str | None:
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            return f"{path} missing: the console tests need Debian's {package} (scripts/test installs it)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


@contextmanager
def chromium(width: int = 1280, height: int = 800) -> Iterator[Any]:
    """A WebDriver for a fresh headless Chromium; quit (and its profile removed) at the end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="magnetar-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll ``check`` (bounded) until it returns something true; its value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as exc:  # an element not there yet, a stale one
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def ready(driver: Any, timeout: float = 60.0) -> None:
    """Wait until the page drew its data (``body[data-ready]``); fail on an error page."""
    state = wait_for(lambda: driver.execute_script("return document.body.dataset.ready"),
                     f"{driver.current_url} to draw", timeout)
    if state != "true":
        notice = driver.find_element("id", "notice").text
        raise AssertionError(f"{driver.current_url} failed to draw: {notice}")
