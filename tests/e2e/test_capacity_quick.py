"""The capacity bench, briefly: its gateway run holds real time, and its load step
drives a Valkey with the store's own ``append_events`` calls (built by the store's
``append_args``, so the two cannot drift apart) and measures a ceiling (issue 14)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_capacity_measures_a_gateway_and_a_primary(tmp_path: Path) -> None:
    out = tmp_path / "cap.json"
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "capacity.py"), "--sessions", "2",
         "--seconds", "3", "--load-procs", "1", "--load-seconds", "1.5", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    m = json.loads(out.read_text())
    assert m["load_rate"] > 100 and m["ceiling_scripts"] > m["load_rate"] * 0.5, m
    assert m["scripts"] > 0 and m["held"], m
    assert "10 gateways x 1,000 sessions" in run.stdout, run.stdout[-2000:]
