"""Real tools for the report's tests: Debian's headless Chromium driven through its
chromedriver (Selenium), and Graphviz's ``dot``. Without them the tests skip, saying what to
install, except in CI, where they fail (``.ci/run`` installs them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PYCLASSIFY = [sys.executable, "-m", "pyclassify"]
CHROMIUM = ("chromium", "chromium-browser")


def missing(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*PYCLASSIFY, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def run_json(*args: str) -> Any:
    r = run(*args)
    assert r.returncode in (0, 5), r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="session")
def graphviz() -> str:
    exe = shutil.which("dot")
    if exe is None:
        missing("Graphviz's dot is not installed (apt-get install graphviz)")
    return exe  # type: ignore[return-value]


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Chromium with its console log kept (``goog:loggingPrefs``)."""
    binary = next((shutil.which(n) for n in CHROMIUM if shutil.which(n)), None)
    driver_exe = shutil.which("chromedriver")
    if binary is None or driver_exe is None:
        missing("Chromium and its driver are not installed (apt-get install chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing("selenium is not installed (pip install -e '.[test]')")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    # --no-sandbox: Chromium refuses to run as root with its sandbox (CI is root).
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--hide-scrollbars",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_exe), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def open_report(driver: Any, path: Path, timeout: float = 60) -> float:
    """Load the report from its file and wait until its grid is drawn; the page's own time
    from navigation to drawn (ms)."""
    driver.get(path.resolve().as_uri())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = driver.execute_script("return document.body && document.body.dataset.ready")
        if ready:
            return float(ready)
        time.sleep(0.02)
    raise AssertionError(f"the report never became ready: {driver.find_element('id', 'summary').text}")


def console_errors(driver: Any) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
