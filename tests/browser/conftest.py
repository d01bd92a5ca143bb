"""Real-browser fixtures: headless Debian Chromium (driven by Playwright, never a
downloaded browser) with a fake microphone that plays a WAV, against a real
gateway process. See /work/shared/research/browser_testing.md for why each flag."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from demo_files import FINAL_SHOT
from gateway_process import GatewayProcess

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROME_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream", "--autoplay-policy=no-user-gesture-required",
]

@pytest.fixture(scope="module")  # a live sync Playwright keeps an event loop running
def playwright() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium; .ci/run does)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed (the [test] extra)")
    with sync_api.sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def tone_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    proc = GatewayProcess(Path(tmp_path_factory.mktemp("gateway")),
                          args=["--plugin", "tone", "--output-lead-ms", "300"]).start()
    try:
        yield proc
    finally:
        proc.stop()


class Demo:
    """One browser (its fake mic plays one WAV script) with the demo page open."""

    def __init__(self, page: Any, out_dir: Path) -> None:
        self.page = page
        self.out_dir = out_dir
        self.log: list[str] = []
        page.on("console", lambda m: self.log.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.log.append(f"pageerror: {e}"))

    def talk(self) -> None:
        # A trusted click: the real autoplay/gesture path (page.evaluate would grant
        # user activation behind our back, so none happens before this).
        self.page.click("#talk")
        self.wait("__duplexDemo.stats.micFrames > 0 || __duplexDemo.stats.errors.length > 0",
                  10)
        assert not self.stats()["errors"], self.log

    def wait(self, js: str, timeout_s: float) -> None:
        try:
            self.page.wait_for_function(js, timeout=timeout_s * 1000)
        except Exception as exc:
            self.shot("timeout.png")
            raise AssertionError(f"{js!r} not true in {timeout_s} s; hook: "
                                 f"{self.hook()}\nconsole: {self.log[-20:]}") from exc

    def stats(self) -> dict[str, Any]:
        return dict(self.page.evaluate("__duplexDemo.stats"))

    def hook(self) -> dict[str, Any]:
        return dict(self.page.evaluate("""() => { const d = window.__duplexDemo; return {
            state: d.state, lastSeq: d.lastSeq, seqGaps: d.seqGaps, reconnects: d.reconnects,
            ctxState: d.ctxState, ctxRate: d.ctxRate, stats: d.stats,
            user: d.transcriptText("user"), assistant: d.transcriptText("assistant")}; }"""))

    def shot(self, name: str = "demo.png") -> Path:
        path = self.out_dir / name
        self.page.screenshot(path=str(path), full_page=True)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        shutil.copyfile(path, FINAL_SHOT)  # the last test's screenshot, for people to look at
        return path


@pytest.fixture
def open_demo(playwright: Any, tmp_path: Path) -> Iterator[Callable[..., Demo]]:
    """open_demo(gateway, wav) → a Demo with the page loaded, Talk not yet pressed."""
    browsers: list[Any] = []

    def open_(gateway: GatewayProcess, wav: Path, *, extra_args: tuple[str, ...] = (),
              query: str = "") -> Demo:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[*CHROME_ARGS, f"--use-file-for-fake-audio-capture={wav.resolve()}%noloop",
                  *extra_args])
        browsers.append(browser)
        page = browser.new_context(viewport={"width": 1000, "height": 900}).new_page()
        demo = Demo(page, tmp_path)
        # aec=0: echo cancellation would process the fake mic's tone; there is no
        # speaker in a headless browser to cancel anyway.
        page.goto(f"{gateway.http}/?aec=0{query}")
        return demo

    yield open_
    for browser in browsers:
        browser.close()
