"""``@openai/agents-realtime``'s WebRTC transport, unchanged but for its URL, in
headless Chromium with a fake microphone: a spoken turn, answered on the track,
and a barge-in that the gateway truncates to what was played.

The page is the SDK's own browser bundle (the npm package tests/clients pins),
served at the gateway's origin by Playwright's router (so the offer is a
same-origin POST); the gateway itself is only ever asked ``/v1/realtime/calls``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from gateway_process import REPO, GatewayProcess

sys.path.insert(0, str(REPO / "tests" / "browser"))
sys.path.insert(0, str(REPO / "tests" / "clients"))
from demo_files import write_wav

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROME_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream", "--autoplay-policy=no-user-gesture-required",
]
PAGE = """<!doctype html><meta charset="utf-8"><title>agents-realtime over WebRTC</title>
<script type="module">
import { OpenAIRealtimeWebRTC, RealtimeAgent, RealtimeSession } from "./openai-realtime-agents.mjs";
const seen = window.seen = { events: [], errors: [], connected: false };
const agent = new RealtimeAgent({ name: "Assistant", instructions: "words=40" });
// the one change a user makes: where the calls go
const transport = new OpenAIRealtimeWebRTC({
  baseUrl: location.origin + "/v1/realtime/calls", useInsecureApiKey: true });
const session = new RealtimeSession(agent, { transport });
session.on("transport_event", (event) => seen.events.push(event));
session.on("error", (event) => seen.errors.push(
  String(event.error?.error?.message ?? event.error)));
window.inbound = async () => {
  const stats = await transport.connectionState.peerConnection.getStats();
  for (const s of stats.values()) {
    if (s.type === "inbound-rtp" && s.kind === "audio") return s.totalAudioEnergy ?? 0;
  }
  return 0;
};
await session.connect({ apiKey: "sk-anything" });
seen.connected = true;
</script>"""


@pytest.fixture(scope="module")
def bundle() -> Path:
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium; .ci/run does)")
    import envs  # tests/clients: npm ci of the pinned clients

    try:
        envs.npm_install()
    except envs.Unavailable as exc:
        envs.unavailable(str(exc))
    return envs.NODE_DIR / "node_modules" / "@openai" / "agents-realtime" / "dist" / "bundle"


def test_the_agents_sdk_holds_a_turn_and_a_barge_in_over_webrtc(
        gateway: GatewayProcess, bundle: Path, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    # a turn (1.2 s of tone), then, while the 40-word answer plays, a barge-in
    wav = write_wav(tmp_path / "mic.wav", [("silence", 1.0), ("tone", 1.2), ("silence", 3.5),
                                           ("tone", 0.8), ("silence", 6.0)])
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            *CHROME_ARGS, f"--use-file-for-fake-audio-capture={wav}%noloop"])
        try:
            page = browser.new_page()
            log: list[str] = []
            page.on("console", lambda m: log.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: log.append(f"pageerror: {e}"))

            def serve(route: Any) -> None:
                name = route.request.url.rsplit("/", 1)[1]
                if name == "index.html":
                    route.fulfill(body=PAGE, content_type="text/html")
                else:
                    route.fulfill(path=str(bundle / name), content_type="text/javascript")

            page.route(f"{gateway.http}/agents/*", serve)
            page.goto(f"{gateway.http}/agents/index.html")

            def wait(js: str, timeout_s: float) -> None:
                try:
                    page.wait_for_function(js, timeout=timeout_s * 1000)
                except Exception as exc:
                    raise AssertionError(f"{js!r} not true in {timeout_s} s; "
                                         f"events: {types(page)[-30:]}\n{log[-20:]}") from exc

            wait("window.seen && window.seen.connected", 30)
            done = "e => e.type === 'response.done'"
            wait(f"window.seen.events.filter({done}).length >= 2", 90)
            events = page.evaluate("window.seen.events")
            first, second = [e for e in events if e["type"] == "response.done"][:2]
            assert first["response"]["status"] == "cancelled", types(page)
            truncated = [e for e in events if e["type"] == "conversation.item.truncated"]
            assert truncated and 0 < truncated[0]["audio_end_ms"] < 40 * 200
            assert second["response"]["status"] == "completed"
            assert not [e for e in events if e["type"] == "response.output_audio.delta"]
            assert page.evaluate("window.inbound()") > 0  # the answer came on the track
            assert page.evaluate("window.seen.errors") == []
        finally:
            browser.close()


def types(page: Any) -> list[str]:
    return list(page.evaluate("window.seen ? window.seen.events.map(e => e.type) : []"))
