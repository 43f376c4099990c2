"""Headless Chromium driven by selenium, for the console's tests: Debian's chromium and
chromedriver (`scripts/tools.sh` installs them); the test fails when they are missing.

With $CNBRAIN_CONSOLE_SCREENSHOTS set to a directory, `screenshot` saves PNGs there (the
docs' pictures: `CNBRAIN_CONSOLE_SCREENSHOTS=docs/console pytest tests/console`).
"""

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOTS_ENV = "CNBRAIN_CONSOLE_SCREENSHOTS"
WAIT_S = 30.0
"""The longest a page is waited for before the test fails (it does not time anything)."""

T = TypeVar("T")


@contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    """A headless Chromium at 1400x1000 CSS pixels."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            pytest.fail(
                f"{path} is missing: the console's tests need Debian's chromium and "
                "chromium-driver (`bash scripts/tools.sh` installs them)",
                pytrace=False,
            )
    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--force-device-scale-factor=1",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(
    driver: webdriver.Chrome, probe: Callable[[webdriver.Chrome], T | None], what: str
) -> T:
    """What `probe` gives once it gives something truthy; the test fails naming `what` (and
    the page's text) when it has not within WAIT_S."""
    try:
        found: T = WebDriverWait(driver, WAIT_S).until(lambda d: probe(d) or False)
        return found
    except Exception as exc:
        text = driver.find_element(By.TAG_NAME, "body").text[:2000]
        pytest.fail(f"{what}: not seen ({type(exc).__name__}); the page shows:\n{text}")


def open_page(driver: webdriver.Chrome, url: str, page: str) -> WebElement:
    """Go to `url` (the console with a fragment) and wait until page `page` is shown there
    (`#view[data-page=...]`, set once the page has its data); the view."""
    driver.get(url)
    return wait_for(
        driver,
        lambda d: _shown(d, page),
        f"the console's page {page!r} at {url}",
    )


def _shown(driver: webdriver.Chrome, page: str) -> WebElement | None:
    view = driver.find_element(By.ID, "view")
    if view.get_attribute("data-page") == "error" and page != "error":
        pytest.fail(f"the console shows an error: {view.text}")
    return view if view.get_attribute("data-page") == page else None


def screenshot(driver: webdriver.Chrome, name: str) -> None:
    """Save the whole page as `name`.png in $CNBRAIN_CONSOLE_SCREENSHOTS, when it is set."""
    folder = os.environ.get(SCREENSHOTS_ENV)
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(max(int(height) + 120, 1000), 4000))
    try:
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))
    finally:
        driver.set_window_size(1400, 1000)
