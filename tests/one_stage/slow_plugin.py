"""The one-stage plugin, loading until the test says so: how a gateway behaves
while its models load (``DUPLEX_TEST_LOAD_GATE``: a file whose existence ends the
load)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from plugins.base import PluginStatus, Progress
from tests.one_stage.reverse_plugin import ReversePlugin


class SlowPlugin(ReversePlugin):
    def load(self, progress: Progress) -> None:
        gate = Path(os.environ["DUPLEX_TEST_LOAD_GATE"])
        progress("[1/1] waiting for the test's gate")
        while not gate.exists():  # a model load has no event either: it just takes time
            time.sleep(0.05)
        self.status = PluginStatus(ready=True, detail="ready")
