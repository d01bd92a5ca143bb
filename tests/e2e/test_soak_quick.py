"""The soak bench, briefly (``bench/soak.py --minutes 0.3``, ~30 s): normal sessions
that drop and resume their sockets lose and duplicate no event while hostile and
careless clients share their gateway, and nothing crashes (issue 10)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_soak_quick() -> None:
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "soak.py"), "--minutes", "0.3", "--sample-s", "5"],
        cwd=REPO, capture_output=True, text=True, timeout=100)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "\n0 lost, 0 duplicated (normal sessions: 4 calls," in run.stdout, run.stdout[-4000:]
    assert "\n0 crashes\n" in run.stdout, run.stdout[-4000:]
    assert "\n0 resumed a session its client had ended" in run.stdout, run.stdout[-4000:]
