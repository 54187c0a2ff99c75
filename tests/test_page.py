"""The page at / in a real headless browser (Debian's chromium + chromium-driver, selenium):
it loads from the server alone, streams an answer, shades drafted tokens and shows a non-zero
acceptance rate. .ci/run installs the browser; elsewhere the test skips without one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from edgespec.server import ServerConfig, create_app
from tests.live_server import LiveServer, tiny_decoder

PROMPT = "the theme of the week"


@pytest.fixture
def browser():
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        reason = (
            "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
        )
        if os.environ.get("CI"):
            pytest.fail(reason + "; .ci/run installs them")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,760"):
        options.add_argument(arg)
    # no network but the server: every other host resolves nowhere
    options.add_argument("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def chat_on_the_page(driver, url: str, prompt: str, max_tokens: int) -> dict:
    """Load the page, send prompt, wait for the answer's end; what the page shows."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url + "/")
    wait = WebDriverWait(driver, 600)
    wait.until(lambda d: d.find_element(By.ID, "model").text not in ("", "(loading)"))
    driver.execute_script(f"document.getElementById('max_tokens').value = {max_tokens}")
    driver.find_element(By.ID, "prompt").send_keys(prompt)
    driver.find_element(By.ID, "send").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#answer .meta, #answer .error"))
    answer = driver.find_element(By.ID, "answer")
    return {
        "model": driver.find_element(By.ID, "model").text,
        "errors": [e.text for e in answer.find_elements(By.CSS_SELECTOR, ".error")],
        "text": "".join(
            s.get_attribute("textContent")
            for s in answer.find_elements(By.CSS_SELECTOR, "span.draft, span.target")
        ),
        "n_draft": len(answer.find_elements(By.CSS_SELECTOR, "span.draft")),
        "n_target": len(answer.find_elements(By.CSS_SELECTOR, "span.target")),
        "acceptance": driver.find_element(By.ID, "acceptance").text,
        "tps": driver.find_element(By.ID, "tps").text,
        "resources": driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        ),
        "console": [e for e in driver.get_log("browser") if e["level"] == "SEVERE"],
    }


def check_page(shown: dict, server: LiveServer, expected_text: str, model: str) -> None:
    assert shown["errors"] == [] and shown["console"] == []
    assert shown["model"] == model
    assert shown["text"] == expected_text  # streamed, shaded token by token
    assert shown["n_draft"] > 0 and shown["n_target"] > 0
    assert shown["acceptance"].endswith("%") and int(shown["acceptance"][:-1]) > 0
    assert float(shown["tps"]) > 0
    assert all(r.startswith(server.url + "/") for r in shown["resources"]), shown["resources"]


def test_the_page_streams_a_chat_and_shows_speculation(browser, tiny_pair, tmp_path):
    with LiveServer(create_app(tiny_decoder(tiny_pair), ServerConfig(model_id="tiny"))) as s:
        shown = chat_on_the_page(browser, s.url, PROMPT, 40)
        import openai

        c = openai.OpenAI(base_url=s.url + "/v1", api_key="-", max_retries=0)
        again = c.chat.completions.create(  # the page sends temperature 0: greedy
            model="tiny",
            messages=[{"role": "user", "content": PROMPT}],
            max_tokens=40,
            temperature=0,
        )
        browser.save_screenshot(str(tmp_path / "page.png"))
    check_page(shown, s, again.choices[0].message.content, "tiny")


@pytest.mark.real
def test_the_page_with_the_demo_pair(browser, demo_target_path, demo_draft_path):
    """Set EDGESPEC_SCREENSHOT=docs/serve-page.png to refresh the screenshot in docs/."""
    from edgespec.backends import RuntimeOptions
    from edgespec.loader import SpecOptions, load_decoder

    decoder = load_decoder(
        demo_target_path,
        demo_draft_path,
        SpecOptions(drafter="model", k=4),
        RuntimeOptions(n_ctx=2048),
        reuse_cache=True,
    )
    prompt = "Write a Python function that checks whether a string is a palindrome."
    with LiveServer(create_app(decoder, ServerConfig(model_id="demo"))) as s:
        shown = chat_on_the_page(browser, s.url, prompt, 160)
        if os.environ.get("EDGESPEC_SCREENSHOT"):
            browser.save_screenshot(str(Path(os.environ["EDGESPEC_SCREENSHOT"])))
        import openai

        c = openai.OpenAI(base_url=s.url + "/v1", api_key="-", max_retries=0)
        again = c.chat.completions.create(
            model="demo",
            messages=[{"role": "user", "content": prompt}],
            max_tokens=160,
            temperature=0,
        )
    assert again.model_extra["timings"]["cache_n"] > 0  # the page's turn was reused
    check_page(shown, s, again.choices[0].message.content, "demo")
