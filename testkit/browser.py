"""A real browser for the dashboard's tests: Debian's headless Chromium, driven by Selenium.

``chrome()`` starts one through Debian's chromedriver (the dashboard's tests, the cross-origin
test and bench/dashboard.py alike); ``BROWSER_MISSING`` says what is missing (None where
chromium, chromedriver and selenium are all installed), for the tests' skips.
"""

from __future__ import annotations

import shutil
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

try:
    import selenium  # noqa: F401

    HAVE_SELENIUM = True
except ImportError:
    HAVE_SELENIUM = False

#: Why no browser can be driven here (None: one can).
BROWSER_MISSING: str | None = (
    "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver); "
    "absent here"
    if not (CHROMIUM and CHROMEDRIVER)
    else None
    if HAVE_SELENIUM
    else "needs selenium (pip install -e '.[test]'); absent here"
)


def chrome(*flags: str) -> Any:
    """Return a headless Chromium driven through Debian's chromedriver (``flags``: more of
    Chromium's command-line switches)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--window-size=1400,1000",
        *flags,
    ):
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
