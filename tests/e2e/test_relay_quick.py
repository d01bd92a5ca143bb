"""The relay bench, briefly (~25 s): in rounds, with permessage-deflate offered, it
runs both targets at every N, every session of every run answered, and prints
the gateway/echo ratio over the rounds (issue 14); ``--together`` runs the two
targets of a round in the same seconds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_relay_rounds_with_deflate(tmp_path: Path) -> None:
    out = tmp_path / "relay.json"
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "relay.py"), "--sessions", "2", "--seconds",
         "3.5", "--repeat", "2", "--deflate", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    runs = json.loads(out.read_text())
    assert sorted((r["target"], r["round"]) for r in runs) == [
        ("echo", 0), ("echo", 1), ("gateway", 0), ("gateway", 1)]
    for r in runs:
        assert r["failure"] == "" and r["frames"] > 0, r
        # a gateway turn every 3 s of tone and silence: each session had its answer
        assert (r["turn"] if r["target"] == "gateway" else r["rtt"]), r
        # the gateway's collector pauses, read from its /metrics around the run
        assert (r["gc_long"] is not None) == (r["target"] == "gateway"), r
    assert "permessage-deflate offered" in run.stdout
    assert "N=2: median " in run.stdout and "x over rounds 2-2 " in run.stdout, run.stdout[-2000:]


def test_together_runs_both_targets_in_the_same_seconds(tmp_path: Path) -> None:
    out = tmp_path / "relay.json"
    seconds = 3.0
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "relay.py"), "--sessions", "2", "--seconds",
         str(seconds), "--repeat", "2", "--together", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    runs = json.loads(out.read_text())
    by_round: dict[int, dict[str, dict[str, object]]] = {}
    for r in runs:
        assert r["failure"] == "" and r["frames"] > 0, r
        by_round.setdefault(r["round"], {})[r["target"]] = r
    assert sorted(by_round) == [0, 1]
    starts = []
    for pair in by_round.values():
        gateway, echo = pair["gateway"], pair["echo"]
        # streamed at once: both told one instant to start at, once both were ready
        assert gateway["started_at"] == echo["started_at"]
        starts.append(float(gateway["started_at"]))
    assert starts[1] - starts[0] >= seconds  # one round after the other
    assert "N=2: median " in run.stdout, run.stdout[-2000:]
