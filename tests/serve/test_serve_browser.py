"""The web page in a real browser: Debian's headless chromium driven by selenium.

Search shows result cards (a hostile file name and metadata stay text), clicking a card shows
the page with the heatmap drawn, and an upload reaches done with its progress bar full. Phone
checks run at 420 px under Chrome's mobile emulation (touch, and a page wider than the screen
widens the layout viewport, as on a real phone).
Set VRAG_SCREENSHOTS=DIR to keep screenshots of each step.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from vrag_compress import VisualIndex, get_compressor
from vrag_compress.serve import ServeConfig, create_app
from vrag_compress.serve.process import serving

pytestmark = pytest.mark.e2e  # a real server and a real browser

KEY = "browser-test-key"
HOSTILE = "<img src=x onerror=window.pwned=1>.pdf"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def served_index(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("browser")
    hostile = folder / HOSTILE
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", hostile)
    index_dir = folder / "web.vrag"
    compressor = get_compressor("uot", ratio=0.25)
    with VisualIndex.create(index_dir, model="tiny-colqwen2", compressor=compressor) as index:
        index.add(
            [hostile, shared_data / "pdfs" / "edge" / "multi_page.pdf"],
            metadata={"title": "<script>window.pwned=2</script>"},
            progress=False,
            ocr="never",
        )
    return index_dir


@pytest.fixture(scope="module")
def server(served_index: Path) -> Iterator[str]:
    with serving(create_app(ServeConfig(served_index, api_key=KEY, ocr="never"))) as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail(
            "browser tests need Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver; `make install` does it)",
            pytrace=False,
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for its errors
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def shot(driver: webdriver.Chrome, name: str) -> None:
    folder = os.environ.get("VRAG_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))


def wait(driver: webdriver.Chrome, condition, timeout: float = 60):  # noqa: ANN001, ANN201
    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda d: condition(d))


PHONE_AND_DESKTOP = pytest.mark.parametrize("width", [420, 1280], ids=["phone", "desktop"])


@contextmanager
def viewport(driver: webdriver.Chrome, width: int, height: int = 900) -> Iterator[None]:
    """The page at ``width`` CSS pixels: a phone (Chrome's mobile emulation: touch, no Escape
    key to speak of) under 800, else a desktop window."""
    mobile = width < 800
    metrics = {"width": width, "height": height, "deviceScaleFactor": 2 if mobile else 1}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {**metrics, "mobile": mobile})
    driver.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": mobile})
    try:
        yield
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        driver.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": False})


def painted_pixels(driver: webdriver.Chrome) -> int:
    return driver.execute_script(
        "const c = document.getElementById('page-canvas');"
        "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        "let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n;"
    )


def canvas_digest(driver: webdriver.Chrome) -> int:
    """A checksum of the drawn overlay pixels (changes when any layer is switched)."""
    return driver.execute_script(
        "const c = document.getElementById('page-canvas');"
        "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        "let h = 0; for (let i = 0; i < d.length; i += 7) h = (h * 31 + d[i]) % 1000000007;"
        "return h;"
    )


def test_search_shows_cards_and_a_click_shows_the_heatmap(server, browser):
    browser.get(server + "/")
    wait(browser, lambda d: "pages" in d.find_element(By.ID, "index-info").text)
    assert "6 pages" in browser.find_element(By.ID, "index-info").text
    browser.find_element(By.ID, "q").send_keys("oral argument before the court")
    browser.find_element(By.ID, "search-button").click()
    cards = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#results .card"))
    assert len(cards) == 5  # k is 5 by default, as in every front end
    names = [c.find_element(By.CLASS_NAME, "name").text for c in cards]
    assert any(HOSTILE in name for name in names)  # shown as text, not turned into an element
    assert browser.execute_script("return window.pwned === undefined")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#results img")) == 5  # thumbnails only
    wait(
        browser,
        lambda d: all(
            d.execute_script("return arguments[0].naturalWidth", img) > 0
            for img in d.find_elements(By.CSS_SELECTOR, "#results img")
        ),
    )
    assert "score" in cards[0].text and "page" in cards[0].text
    shot(browser, "1-results")

    cards[0].click()
    wait(browser, lambda d: d.find_element(By.ID, "viewer").get_attribute("data-state") == "ready")
    assert browser.find_element(By.ID, "viewer").is_displayed()
    canvas = browser.find_element(By.ID, "page-canvas")
    assert int(canvas.get_attribute("data-heat-cells")) > 0
    heat_only = painted_pixels(browser)
    assert heat_only > 0
    assert "score" in browser.find_element(By.ID, "viewer-score").text
    assert browser.find_elements(By.CSS_SELECTOR, "#token-list li")
    shot(browser, "2-heatmap")
    heat_digest = canvas_digest(browser)
    browser.find_element(By.ID, "toggle-overlay").click()  # UOT's merged groups tint the patches
    assert painted_pixels(browser) >= heat_only and canvas_digest(browser) != heat_digest
    shot(browser, "3-heatmap-overlay")
    browser.find_element(By.ID, "toggle-heat").click()
    browser.find_element(By.ID, "toggle-overlay").click()
    browser.find_element(By.ID, "toggle-regions").click()
    assert painted_pixels(browser) == 0
    browser.find_element(By.ID, "viewer-close").click()
    assert not browser.find_element(By.ID, "viewer").is_displayed()
    assert browser.execute_script("return window.pwned === undefined")


def test_upload_reaches_done_and_lists_the_document(server, browser, shared_data):
    browser.get(server + "/")
    key = browser.find_element(By.ID, "api-key")
    key.send_keys(KEY)
    browser.find_element(By.ID, "q").click()  # blur: the key is saved on change
    pdf = shared_data / "pdfs" / "icdar2013" / "us-017.pdf"  # 7 pages
    browser.find_element(By.ID, "upload-file").send_keys(str(pdf))
    browser.find_element(By.ID, "upload-button").click()
    bar = browser.find_element(By.ID, "upload-progress")
    wait(browser, lambda d: bar.get_attribute("data-state") in ("done", "failed"), timeout=240)
    status = browser.find_element(By.ID, "upload-status").text
    assert bar.get_attribute("data-state") == "done", status
    assert bar.get_attribute("value") == bar.get_attribute("max") == "7"
    assert "us-017.pdf: done, 7/7 pages" in status
    wait(browser, lambda d: "us-017.pdf (7 pages)" in d.find_element(By.ID, "documents").text)
    shot(browser, "4-upload-done")
    browser.find_element(By.ID, "q").send_keys("table")
    browser.find_element(By.ID, "k").clear()
    browser.find_element(By.ID, "k").send_keys("20")
    browser.find_element(By.ID, "search-button").click()
    cards = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#results .card"))
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results .card")) == 13)
    assert any("us-017.pdf" in c.text for c in browser.find_elements(By.CSS_SELECTOR, ".card"))
    assert cards


def upload_status(driver: webdriver.Chrome, url: str, pdf: Path) -> str:
    """The upload's status line once an upload without a key was refused."""
    driver.get(url + "/")
    driver.execute_script("sessionStorage.clear()")
    driver.get(url + "/")
    driver.find_element(By.ID, "upload-file").send_keys(str(pdf))
    driver.find_element(By.ID, "upload-button").click()
    status = driver.find_element(By.ID, "upload-status")
    wait(driver, lambda d: "API key" in status.text)
    assert "error" in status.get_attribute("class")
    return status.text


@PHONE_AND_DESKTOP
def test_upload_without_the_key_says_to_type_it_in_the_key_box(
    server, served_index, browser, shared_data, width
):
    pdf = shared_data / "pdfs" / "edge" / "ocr_test.pdf"
    with viewport(browser, width):
        refused = upload_status(browser, server, pdf)
        assert "API key box" in refused and "Authorization" not in refused  # 401: no header talk
        with serving(create_app(ServeConfig(served_index, ocr="never"))) as keyless:
            off = upload_status(browser, keyless, pdf)  # 403: the server has no key at all
        assert "--api-key" in off and "API key box" in off and "Authorization" not in off


def test_ask_box_streams_the_answer_and_links_cited_regions(server, served_index, browser):
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_vrag_compress import LangChainChatModel

    browser.get(server + "/")
    wait(browser, lambda d: "pages" in d.find_element(By.ID, "index-info").text)
    assert not browser.find_element(By.ID, "ask-section").is_displayed()  # no LLM: no ask box
    model = GenericFakeChatModel(messages=iter([AIMessage("It is on the first page [1].")]))
    config = ServeConfig(served_index, ocr="never")
    with serving(create_app(config, chat_model=LangChainChatModel(model))) as url:
        browser.get(url + "/")
        wait(browser, lambda d: d.find_element(By.ID, "ask-section").is_displayed())
        browser.find_element(By.ID, "ask-q").send_keys("where is the argument?")
        browser.find_element(By.ID, "ask-button").click()
        answer = browser.find_element(By.ID, "ask-answer")
        wait(browser, lambda d: answer.text == "It is on the first page [1].")
        links = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#citations a"))
        assert links[0].text.startswith("[1] ") and ", page " in links[0].text
        region_links = [a for a in links if "region x" in a.text]
        assert region_links  # cited regions are links too
        shot(browser, "5-ask")
        region_links[0].click()
        wait(
            browser,
            lambda d: d.find_element(By.ID, "viewer").get_attribute("data-state") == "ready",
        )
        assert painted_pixels(browser) > 0  # the heatmap and the cited region are drawn
        shot(browser, "6-cited-region")


def requested(driver: webdriver.Chrome, path: str) -> list[str]:
    """The URLs the page fetched under ``path`` (the browser's resource timing entries)."""
    return driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => n.includes(arguments[0]))",
        path,
    )


def search_in_mode(driver: webdriver.Chrome, mode: str, alpha: str = "") -> list:
    driver.execute_script("performance.clearResourceTimings()")
    Select(driver.find_element(By.ID, "mode")).select_by_value(mode)
    alpha_box = driver.find_element(By.ID, "alpha")
    assert alpha_box.is_displayed() == (mode == "hybrid")  # alpha weighs hybrid's two sides
    if alpha:
        alpha_box.clear()
        alpha_box.send_keys(alpha)
    driver.find_element(By.ID, "search-button").click()
    wait(driver, lambda d: "for \u201c" in d.find_element(By.ID, "search-status").text)
    return driver.find_elements(By.CSS_SELECTOR, "#results .card")


def test_hybrid_and_text_modes_search_with_alpha(server, browser):
    browser.get(server + "/")
    browser.find_element(By.ID, "q").send_keys("oral argument")
    assert search_in_mode(browser, "hybrid", alpha="0.5")
    (url,) = requested(browser, "/api/search?")
    assert "mode=hybrid" in url and "alpha=0.5" in url
    assert search_in_mode(browser, "text")
    (url,) = requested(browser, "/api/search?")
    assert "mode=text" in url and "alpha" not in url
    assert "error" not in browser.find_element(By.ID, "search-status").get_attribute("class")


def test_one_page_is_singular_and_a_delete_asks_first(server, browser):
    browser.get(server + "/")
    documents = browser.find_element(By.ID, "documents")
    wait(browser, lambda d: "(1 page)" in documents.text)
    assert "1 pages" not in documents.text and "1 pages" not in browser.page_source
    count = len(documents.find_elements(By.CSS_SELECTOR, "li"))
    documents.find_element(By.CSS_SELECTOR, "button.delete").click()
    confirm = wait(browser, lambda d: d.switch_to.alert)
    assert confirm.text.startswith("Delete ") and "cannot be undone" in confirm.text
    confirm.dismiss()  # nothing is deleted
    time.sleep(0.5)
    assert len(documents.find_elements(By.CSS_SELECTOR, "li")) == count


@pytest.mark.parametrize(("width", "name"), [(420, "phone"), (1280, "desktop")])
def test_the_page_fits_phone_and_desktop_widths(server, browser, width, name):
    browser.set_window_size(width, 900)
    try:
        browser.get(server + "/")
        wait(browser, lambda d: "page" in d.find_element(By.ID, "index-info").text)
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#documents button.delete"))
        shot(browser, f"6-{name}-{width}px")
        inner = browser.execute_script("return window.innerWidth")
        assert inner <= width
        overflow = browser.execute_script(
            "const h = document.querySelector('header');"
            "return [document.documentElement.scrollWidth, h.scrollWidth, h.clientWidth,"
            " ...[...h.children].map(c => c.getBoundingClientRect().right)]"
        )
        page_width, header_scroll, header_client, *rights = overflow
        assert page_width <= inner and header_scroll <= header_client  # no sideways scrolling
        assert max(rights) <= inner  # every header item inside the viewport
        for button in browser.find_elements(By.CSS_SELECTOR, "#documents button.delete"):
            lines = browser.execute_script(
                "const b = arguments[0]; const s = getComputedStyle(b);"
                "return (b.clientHeight - parseFloat(s.paddingTop) - parseFloat(s.paddingBottom))"
                " / (s.lineHeight === 'normal' ? parseFloat(s.fontSize) * 1.2"
                " : parseFloat(s.lineHeight))",
                button,
            )
            assert button.text == "delete" and lines < 1.6  # one line, not "dele / te"
        png = browser.get_screenshot_as_png()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        browser.set_window_size(1400, 1000)


def open_viewer_on_the_long_name(driver: webdriver.Chrome, url: str) -> None:
    """Search, then open the page whose file name is one long unbreakable word."""
    driver.get(url + "/")
    driver.find_element(By.ID, "q").send_keys("oral argument")
    cards = search_in_mode(driver, "text")  # its words are on that page: it is found first
    next(c for c in cards if HOSTILE in c.text).click()
    wait(driver, lambda d: d.find_element(By.ID, "viewer").get_attribute("data-state") == "ready")


@PHONE_AND_DESKTOP
def test_the_page_viewer_fits_the_screen_and_its_close_button_works(server, browser, width):
    with viewport(browser, width):
        open_viewer_on_the_long_name(browser, server)
        shot(browser, f"7-viewer-{width}px")
        box = browser.execute_script(
            "const r = (id) => document.getElementById(id).getBoundingClientRect();"
            "const c = r('viewer-close');"
            "const hit = document.elementFromPoint((c.left + c.right) / 2, (c.top + c.bottom) / 2);"
            "return {inner: innerWidth, height: innerHeight,"
            " page: document.documentElement.scrollWidth, viewer: r('viewer'),"
            " image: r('page-image'), close: c, onTop: hit && hit.id === 'viewer-close'}"
        )
        assert box["inner"] == width  # the page did not widen the phone's layout viewport
        assert box["page"] <= width  # no sideways scrolling
        assert 0 <= box["viewer"]["left"] and box["viewer"]["right"] <= width
        assert box["image"]["right"] <= box["viewer"]["right"]  # the page image fits too
        close = box["close"]
        assert 0 <= close["left"] and close["right"] <= width
        assert 0 <= close["top"] and close["bottom"] <= box["height"]
        assert box["onTop"]  # nothing covers it: a tap reaches it
        assert painted_pixels(browser) > 0
        assert "oral argument" in browser.find_element(By.ID, "page-text").text  # the snippet
        browser.find_element(By.ID, "viewer-close").click()
        assert not browser.find_element(By.ID, "viewer").is_displayed()


@PHONE_AND_DESKTOP
def test_cards_show_the_text_around_the_match_and_which_side_found_the_page(server, browser, width):
    with viewport(browser, width):
        browser.get(server + "/")
        browser.find_element(By.ID, "q").send_keys("oral argument")
        cards = search_in_mode(browser, "hybrid")
        shot(browser, f"8-hybrid-cards-{width}px")
        transcript = next(c for c in cards if HOSTILE in c.text)
        snippet = transcript.find_element(By.CLASS_NAME, "snippet").text
        # the transcript starts with its line numbers "1 2 3 4 ..."; the match is far after
        assert "oral argument" in snippet and not snippet.startswith("1 2 3")
        found = [c.find_element(By.CLASS_NAME, "found-by").text for c in cards]
        assert set(found) <= {"found by text + visual", "found by text", "found by visual"}
        assert transcript.find_element(By.CLASS_NAME, "found-by").text == ("found by text + visual")
        cards = search_in_mode(browser, "text")
        assert [c.find_element(By.CLASS_NAME, "found-by").text for c in cards] == (
            ["found by text"] * len(cards)
        )
        cards = search_in_mode(browser, "exact")  # one side only: nothing to say
        assert cards and not browser.find_elements(By.CSS_SELECTOR, "#results .found-by")


def test_the_console_stays_clean_and_the_favicon_answers(server, browser):
    browser.get_log("browser")  # empty the buffer
    browser.get(server + "/")
    wait(browser, lambda d: "pages" in d.find_element(By.ID, "index-info").text)
    status = browser.execute_script("return fetch('/favicon.ico').then(r => r.status)")
    assert status in (200, 204)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []


def test_search_with_an_image_finds_that_page_and_refuses_a_non_image(
    server, served_index, browser, tmp_path
):
    with VisualIndex.open(served_index, readonly=True) as index:
        # the fixture's multi-page PDF (earlier tests in this module upload others)
        (doc,) = [d for d in index.documents() if str(d.source).endswith("multi_page.pdf")]
        index.page_image(doc.doc_id, 2).save(tmp_path / "page two.png")
    (tmp_path / "notes.png").write_text("words, not pixels")
    browser.get(server + "/")
    wait(browser, lambda d: "pages" in d.find_element(By.ID, "index-info").text)
    browser.find_element(By.ID, "image-q").send_keys(str(tmp_path / "page two.png"))
    browser.find_element(By.ID, "image-search-button").click()
    cards = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#results .card"))
    status = browser.find_element(By.ID, "search-status").text
    assert status == "5 pages like page two.png"  # a Col* index reads the picture, not OCR
    assert "multi_page.pdf" in cards[0].text and "page 2 \u00b7" in cards[0].text
    shot(browser, "image-search")
    browser.find_element(By.ID, "image-q").clear()
    browser.find_element(By.ID, "image-q").send_keys(str(tmp_path / "notes.png"))
    browser.find_element(By.ID, "image-search-button").click()
    wait(
        browser, lambda d: "error" in d.find_element(By.ID, "search-status").get_attribute("class")
    )
    assert "not an image" in browser.find_element(By.ID, "search-status").text
    assert not browser.find_elements(By.CSS_SELECTOR, "#results .card")


@pytest.fixture(scope="module")
def text_server(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An index built by the offline MiniLM text encoder: pages without patches."""
    index_dir = tmp_path_factory.mktemp("browser-text") / "text.vrag"
    with VisualIndex.create(index_dir, model="minilm") as index:
        pdf = shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf"
        index.add([pdf], progress=False, ocr="never")
    with serving(create_app(ServeConfig(index_dir, api_key=KEY, ocr="never"))) as url:
        yield url


@PHONE_AND_DESKTOP
def test_a_text_index_viewer_marks_the_matched_words_and_no_markers(text_server, browser, width):
    with viewport(browser, width):
        browser.get(text_server + "/")
        wait(browser, lambda d: "page" in d.find_element(By.ID, "index-info").text)
        browser.find_element(By.ID, "q").send_keys("oral argument")
        browser.find_element(By.ID, "search-button").click()
        cards = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#results .card"))
        cards[0].click()
        viewer = browser.find_element(By.ID, "viewer")
        wait(browser, lambda d: viewer.get_attribute("data-state") == "ready")
        shot(browser, f"text-viewer-{width}")
        marked = [m.text.lower() for m in browser.find_elements(By.CSS_SELECTOR, "#page-text mark")]
        assert "oral" in marked and "argument" in marked
        for toggle in ("toggle-heat", "toggle-overlay", "toggle-regions"):
            assert not browser.find_element(By.ID, toggle).is_enabled()
        terms = browser.find_element(By.ID, "token-list").text
        assert terms and "[CLS]" not in terms and "[SEP]" not in terms
        assert "reads page text" in browser.find_element(By.ID, "text-match-note").text
        browser.find_element(By.ID, "viewer-close").click()


def test_the_upload_bar_moves_as_pages_are_committed(
    server, browser, shared_data, monkeypatch: pytest.MonkeyPatch
):
    from vrag_compress.indexing import Indexer

    write = Indexer.write

    def slow_write(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        write(self, *args, **kwargs)
        time.sleep(1.2)  # longer than the page's 0.5 s poll: every commit is seen

    monkeypatch.setattr(Indexer, "write", slow_write)
    browser.get(server + "/")
    browser.find_element(By.ID, "api-key").send_keys(KEY)
    browser.find_element(By.ID, "q").click()  # blur: the key is saved on change
    browser.execute_script(
        "window.barValues = [];"
        "const bar = document.getElementById('upload-progress');"
        "new MutationObserver(() => window.barValues.push(bar.value + '/' + bar.max))"
        ".observe(bar, {attributes: true});"
    )
    pdf = shared_data / "pdfs" / "icdar2013" / "eu-012.pdf"  # 7 pages: commits of 2
    browser.find_element(By.ID, "upload-file").send_keys(str(pdf))
    browser.find_element(By.ID, "upload-button").click()
    bar = browser.find_element(By.ID, "upload-progress")
    wait(browser, lambda d: bar.get_attribute("data-state") in ("done", "failed"), timeout=240)
    seen = browser.execute_script("return window.barValues")
    assert bar.get_attribute("data-state") == "done" and "7/7" in seen
    assert {"2/7", "4/7", "6/7"} <= set(seen), seen  # not 0/7 until the end
