"""The inspector's pages in headless Chromium (Debian's chromium and chromium-driver, driven
by Selenium) against a real uvicorn server on loopback.

Selenium talks W3C WebDriver to the distribution's own chromedriver, which Debian ships at
the very version of its chromium: nothing is downloaded and no browser build is pinned.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from agentsessions_cli._common import connect
from agentsessions_cli._inspect_app import create_app
from inspect_store import HOSTILE_ID, HOSTILE_TEXT, LONG_EVENTS, TOKEN

uvicorn = pytest.importorskip("uvicorn")
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support.expected_conditions import staleness_of  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

REQUIRE = os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") == "1"
#: Where the docs' screenshots are written when set (``docs/images`` to refresh them).
SCREENSHOTS = os.environ.get("AGENTSESSIONS_INSPECT_SCREENSHOTS")


def _browser_paths() -> tuple[str, str]:
    """Debian's chromium and chromedriver; elsewhere (a GitHub runner) its Chrome and the
    chromedriver of ``$CHROMEWEBDRIVER``, which match each other too."""
    chromium = next(
        filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
    )
    driver = shutil.which("chromedriver") or shutil.which(
        "chromedriver", path=os.environ.get("CHROMEWEBDRIVER", "")
    )
    if chromium is None or driver is None:
        message = "no chromium/chromedriver (apt-get install chromium chromium-driver)"
        if REQUIRE:
            pytest.fail(message + " (AGENTSESSIONS_REQUIRE_SERVERS=1)", pytrace=False)
        pytest.skip(message)
    return chromium, driver


class _Server:
    def __init__(self, url: str, *, allow_writes: bool) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        app = create_app(
            lambda: connect(url),
            token=TOKEN,
            allow_writes=allow_writes,
            allowed_hosts={f"127.0.0.1:{self.port}"},
        )
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]})

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> _Server:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the inspector's server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    chromium, driver_path = _browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1200,900",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver_path))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def server(store_url: str) -> Iterator[_Server]:
    with _Server(store_url, allow_writes=False) as running:
        yield running


@pytest.fixture
def page(browser: WebDriver, server: _Server) -> WebDriver:
    browser.get(f"{server.base}/?token={TOKEN}")  # the printed address: sets the cookie
    return browser


def _open(browser: WebDriver, server: _Server, path: str, **params: object) -> None:
    browser.get(server.base + path + ("?" + urlencode(params) if params else ""))


def _click(browser: WebDriver, element: WebElement) -> None:
    """Click a link or button and wait for the page it leads to."""
    old = browser.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(browser, 15).until(staleness_of(old))


def _shoot(browser: WebDriver, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        height = int(browser.execute_script("return document.body.scrollHeight"))
        browser.set_window_size(1200, min(max(height, 600), 2400))
        browser.save_screenshot(str(Path(SCREENSHOTS) / f"inspect-{name}.png"))
        browser.set_window_size(1200, 900)


def test_the_printed_address_opens_the_listing_and_drops_the_token(page: WebDriver) -> None:
    assert "token=" not in page.current_url
    rows = page.find_elements(By.CSS_SELECTOR, "#sessions a.sid")
    assert rows[0].text == "compacted"
    assert "long" in [row.text for row in rows]
    _shoot(page, "sessions")


def test_the_timeline_renders_in_order(page: WebDriver, server: _Server) -> None:
    _open(page, server, "/", user="ada")
    _click(page, page.find_element(By.LINK_TEXT, "demo"))
    assert page.find_element(By.ID, "session-id").text == "demo"
    items = page.find_elements(By.CSS_SELECTOR, "ol.timeline > li.item")
    positions = [int(item.get_attribute("data-position") or -1) for item in items]
    assert positions == sorted(positions) and positions[0] == 0
    texts = [item.text for item in items]
    first_tea = next(i for i, text in enumerate(texts) if "I like green tea" in text)
    sent = next(i for i, text in enumerate(texts) if "Done: I sent a note to Bob" in text)
    assert first_tea < sent
    call = page.find_element(By.CSS_SELECTOR, "li.item.call")
    assert "send_note" in call.text and "DONE" in call.text.upper()
    # User bubbles sit on the right, the agent's on the left.
    user = page.find_element(By.CSS_SELECTOR, "li.message.from-user")
    agent = page.find_element(By.CSS_SELECTOR, "li.message.from-agent")
    assert user.location["x"] > agent.location["x"]
    _shoot(page, "timeline")


def test_a_pending_approval_is_visible(page: WebDriver, server: _Server) -> None:
    _open(page, server, "/session", id="waiting")
    banner = page.find_element(By.ID, "pending")
    assert banner.is_displayed()
    assert "Waiting for approval" in banner.text and "send_note" in banner.text
    call = page.find_element(By.CSS_SELECTOR, "li.item.call.pending")
    assert "WAITING FOR APPROVAL" in call.text.upper()
    # Highlighted: the banner's background is not the page's.
    assert banner.value_of_css_property("background-color") != page.find_element(
        By.TAG_NAME, "body"
    ).value_of_css_property("background-color")
    _shoot(page, "pending")


def test_paging_through_a_long_history(page: WebDriver, server: _Server) -> None:
    _open(page, server, "/session", id="long")

    def shown() -> list[int]:
        items = page.find_elements(By.CSS_SELECTOR, "ol.timeline > li.item")
        return [int(item.get_attribute("data-position") or -1) for item in items]

    assert shown() == list(range(LONG_EVENTS - 50, LONG_EVENTS))
    _click(page, page.find_element(By.ID, "older"))
    assert shown() == list(range(LONG_EVENTS - 100, LONG_EVENTS - 50))
    _click(page, page.find_element(By.ID, "older"))
    assert shown() == list(range(LONG_EVENTS - 100))
    assert not page.find_elements(By.ID, "older")
    _click(page, page.find_element(By.ID, "newer"))
    assert shown() == list(range(LONG_EVENTS - 100, LONG_EVENTS - 50))


def test_listing_pages_and_filters(page: WebDriver, server: _Server) -> None:
    first = [a.text for a in page.find_elements(By.CSS_SELECTOR, "#sessions a.sid")]
    _click(page, page.find_element(By.ID, "next-page"))
    second = [a.text for a in page.find_elements(By.CSS_SELECTOR, "#sessions a.sid")]
    assert second and not set(first) & set(second)
    _open(page, server, "/")
    page.find_element(By.NAME, "user").send_keys("ada")
    _click(page, page.find_element(By.CSS_SELECTOR, "form.filters button"))
    assert [a.text for a in page.find_elements(By.CSS_SELECTOR, "#sessions a.sid")] == [
        "compacted",
        "demo",
    ]


def test_hostile_content_stays_inert(page: WebDriver, server: _Server) -> None:
    _open(page, server, "/session", id=HOSTILE_ID)
    assert page.execute_script("return window.__xss === undefined")
    assert page.find_element(By.ID, "session-id").text == HOSTILE_ID
    body = page.find_element(By.TAG_NAME, "main").text
    assert HOSTILE_TEXT in body  # shown as the text it is
    assert not page.find_elements(By.CSS_SELECTOR, "main script, main img, main b, main i")
    _open(page, server, "/", prefix=HOSTILE_TEXT)
    assert page.execute_script("return window.__xss === undefined")
    assert page.find_element(By.NAME, "prefix").get_attribute("value") == HOSTILE_TEXT


def test_writes_are_refused_without_the_flag(page: WebDriver, server: _Server) -> None:
    _open(page, server, "/session", id="demo")
    assert not page.find_elements(By.ID, "delete")
    assert not page.find_elements(By.LINK_TEXT, "rewind to here")
    _open(page, server, "/session/confirm", action="delete", id="demo")
    assert "read-only" in page.find_element(By.ID, "message").text
    _open(page, server, "/session", id="demo")
    assert page.find_element(By.ID, "session-id").text == "demo"


def test_with_writes_a_delete_is_confirmed_first(browser: WebDriver, writable_url: str) -> None:
    with _Server(writable_url, allow_writes=True) as running:
        browser.get(f"{running.base}/session?{urlencode({'id': 'demo', 'token': TOKEN})}")
        _shoot(browser, "writes")
        _click(browser, browser.find_element(By.ID, "delete"))
        assert "cannot be undone" in browser.find_element(By.TAG_NAME, "main").text
        _click(browser, browser.find_element(By.ID, "confirm"))
        assert "deleted demo" in browser.find_element(By.ID, "done").text
        assert "demo" not in [
            a.text for a in browser.find_elements(By.CSS_SELECTOR, "#sessions a.sid")
        ]


def test_with_writes_a_fork_links_back_to_its_cut(browser: WebDriver, writable_url: str) -> None:
    with _Server(writable_url, allow_writes=True) as running:
        browser.get(f"{running.base}/session?{urlencode({'id': 'demo', 'token': TOKEN})}")
        second = browser.find_elements(By.LINK_TEXT, "fork from here")[1]
        _click(browser, second)
        browser.find_element(By.NAME, "new_id").send_keys("demo-retry")
        _click(browser, browser.find_element(By.ID, "confirm"))
        assert "forked from demo" in browser.find_element(By.ID, "done").text
        assert browser.find_element(By.ID, "session-id").text == "demo-retry"
        assert browser.find_element(By.ID, "fork-source").text == "demo"
        _click(browser, browser.find_element(By.ID, "fork-cut"))
        # The source's page, scrolled to the cut, which :target marks.
        assert browser.find_element(By.ID, "session-id").text == "demo"
        marked = browser.execute_script("return document.querySelector(':target').id")
        assert marked == "e1"
        branches = browser.find_element(By.ID, "branches")
        assert [a.text for a in branches.find_elements(By.CSS_SELECTOR, "a.branch-id")] == [
            "demo-retry"
        ]
