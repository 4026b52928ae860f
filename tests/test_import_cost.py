"""What importing kafkakit costs: kio's Hypothesis integration stays off (fresh interpreters).

Hypothesis is a dev dependency, so the test environment always has it installed.
"""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = r"""
import json, sys
{first}
import kafkakit.producer, kafkakit.consumer
import kio.static._phantom as phantom
report = {{"hypothesis_imported": "hypothesis" in sys.modules, "kio_hooks": phantom.hypothesis is not None}}
import hypothesis.strategies as st  # still importable afterwards, and works
report["strategy_works"] = st.integers(0, 3).example() in range(4)
print(json.dumps(report))
"""


def _probe(first: str) -> dict[str, bool]:
    code = _PROBE.format(first=first)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, bool] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_importing_kafkakit_does_not_import_hypothesis() -> None:
    report = _probe("")
    assert report == {"hypothesis_imported": False, "kio_hooks": False, "strategy_works": True}


def test_hypothesis_imported_first_keeps_kios_strategies() -> None:
    report = _probe("import hypothesis")
    assert report == {"hypothesis_imported": True, "kio_hooks": True, "strategy_works": True}
