"""The installed wheel is the product: it serves everything from any directory.

The gateway runs from the fresh virtual environment (``conftest.installed``)
with a working directory that holds no source, on the tone plugin, so nothing
of the checkout can stand in for what the wheel failed to ship.
"""

from __future__ import annotations

import re
import subprocess
import wave
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from gateway_process import REPO
from wheel_env import InstalledGateway, clean_env

pytestmark = [pytest.mark.install, pytest.mark.timeout(300)]

DEMO_FILES = sorted(p for p in (REPO / "web_demo").iterdir() if p.suffix != ".py"
                    and p.is_file())
# every module the wheel ships, imported by name; each says where it came from
# A module that is an optional extra's own half (imported lazily, only when the
# extra's feature is asked for) and the top-level package it may miss.
EXTRA_MODULES = {"gateway.tracing_otlp": "opentelemetry"}

IMPORT_ALL = f"""
import importlib, pkgutil
extra = {EXTRA_MODULES!r}
for top in ("duplex", "engines", "orchestrator", "plugins", "gateway", "web_demo"):
    package = importlib.import_module(top)
    print(top, package.__file__)
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        try:
            print(info.name, importlib.import_module(info.name).__file__)
        except ModuleNotFoundError as exc:
            if info.name not in extra or (exc.name or "").split(".")[0] != extra[info.name]:
                raise
            print(info.name, "missing-extra:" + exc.name)
"""


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory with no source in it."""
    return tmp_path_factory.mktemp("elsewhere")


@pytest.fixture(scope="module")
def served(installed: Path, elsewhere: Path) -> Iterator[InstalledGateway]:
    gateway = InstalledGateway(installed, elsewhere).start()
    try:
        yield gateway
    finally:
        gateway.stop()


def test_every_module_imports_with_the_core_dependencies_alone(installed: Path,
                                                               elsewhere: Path) -> None:
    # heavy dependencies (the [cpu]/[gpu]/[tts] extras) are imported lazily inside
    # the plugins, so every module imports without them; an extra's own half
    # (EXTRA_MODULES) may miss only its extra
    out = subprocess.run([str(installed / "bin" / "python"), "-c", IMPORT_ALL],
                         cwd=elsewhere, env=clean_env(), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    modules = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    site = str(installed / "lib")
    assert not [name for name, path in modules.items()
                if not path.startswith(site) and not path.startswith("missing-extra:")]
    assert {"gateway.call", "gateway.call_audio", "plugins.cascade.plugin",
            "duplex.store.embedded"} <= modules.keys()


def test_the_demo_page_and_every_demo_file_are_served(served: InstalledGateway) -> None:
    page = httpx.get(f"http://{served.address}/", timeout=10)
    assert page.status_code == 200
    assert "<title>duplex-gateway voice demo</title>" in page.text
    linked = set(re.findall(r'(?:href|src)="([^":]+)"', page.text))
    assert {"app.js", "style.css"} <= linked
    for path in DEMO_FILES:
        asset = httpx.get(f"http://{served.address}/{path.name}", timeout=10)
        assert asset.status_code == 200, path.name
        assert asset.content == path.read_bytes(), path.name


def test_readyz(served: InstalledGateway) -> None:
    ready = httpx.get(f"http://{served.address}/readyz", timeout=10)
    assert ready.status_code == 200, ready.text
    assert ready.json()["plugin"] == "tone"


def test_the_twilio_webhook_answers_twiml(served: InstalledGateway) -> None:
    # no --twilio-auth-token: the webhook takes unsigned requests
    reply = httpx.post(f"http://{served.address}/v1/twilio/voice", timeout=10,
                       data={"CallSid": "CA0123456789abcdef", "From": "+15550100"})
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("application/xml")
    assert f'<Stream url="ws://{served.address}/v1/twilio/media-stream">' in reply.text
    assert '<Parameter name="token" value="' in reply.text


def test_the_installed_call_command_holds_a_realtime_turn(installed: Path, elsewhere: Path,
                                                          served: InstalledGateway) -> None:
    rate = 16000
    t = np.arange(int(rate * 1.2)) / rate
    speech = (0.3 * 32767 * np.sin(2 * np.pi * 440 * t)).astype("<i2")
    pad = np.zeros(rate // 4, dtype="<i2")
    with wave.open(str(elsewhere / "question.wav"), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(np.concatenate([pad, speech, pad]).tobytes())
    out = subprocess.run(
        [str(installed / "bin" / "duplex-gateway"), "call", "--wav", "question.wav",
         "--out", "answer.wav", "--fast", "--url", f"ws://{served.address}/v1/realtime"],
        cwd=elsewhere, env=clean_env(), capture_output=True, text=True, timeout=90)
    # exit 0: the turn's response.done arrived with status "completed"
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tone turn 1" in out.stdout and "answer to turn 1" in out.stdout
    with wave.open(str(elsewhere / "answer.wav"), "rb") as answer:
        assert answer.getframerate() == 24000 and answer.getnframes() >= 24000


def test_an_installed_gateway_keeps_its_data_in_the_users_dir(installed: Path,
                                                                elsewhere: Path) -> None:
    # a checkout's default is its own .data/; an installed package has no checkout
    env = {**clean_env(), "XDG_DATA_HOME": str(elsewhere / "xdg")}
    out = subprocess.run([str(installed / "bin" / "duplex-gateway"), "serve", "--help"],
                         cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    flat = "".join(out.stdout.split())  # argparse wraps the help, at hyphens too
    assert f"default{elsewhere / 'xdg' / 'duplex-gateway'}]" in flat, out.stdout
