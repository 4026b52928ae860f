"""Every guide page's code runs: one test per page of the mkdocs nav's "Guides" section.

The convention (AGENTS.md, "Issue 12 shared conventions") is implemented in
tests/docs_runner.py: a fresh broker_min child process per page, blocks run
in page order in one temporary directory.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tests.docs_runner import REPO, GuideError, nav_section, parse_page, run_page

DOCS = REPO / "docs"
GUIDES = nav_section("Guides")


def test_guides_in_nav_exist() -> None:
    missing = [page for page in GUIDES if not (DOCS / page).is_file()]
    assert not missing, f"mkdocs.yml lists guide pages that do not exist in docs/: {missing}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", GUIDES)
def test_guide_runs(page: str, tmp_path: Path) -> None:
    report = run_page(DOCS / page, tmp_path / "page")
    assert report.ran, f"{page} has no python or bash block that runs"
    for line, reason in report.not_run:
        warnings.warn(f"{page}:{line}: block not run: {reason}", stacklevel=1)


FAKE_PAGE = """\
# A fake guide

<!-- file: settings.json -->
```json
{"bootstrap": "localhost:9092"}
```

```python
import json, pathlib
settings = json.loads(pathlib.Path("settings.json").read_text())
assert settings["bootstrap"].startswith("127.0.0.1:"), settings
pathlib.Path("seen.txt").write_text(settings["bootstrap"])
```

```bash
test "$(cat seen.txt)" != ""
command -v kafkakit-broker
```

<!-- not-run: needs a real cluster -->
```python
raise SystemExit(3)
```

```text
shown, not run
```
"""


def test_runner_runs_a_page(tmp_path: Path) -> None:
    page = tmp_path / "fake.md"
    page.write_text(FAKE_PAGE)
    report = run_page(page, tmp_path / "work")
    assert report.ran == [(8, "python"), (15, "bash")]
    assert report.not_run == [(21, "needs a real cluster")]
    address = (tmp_path / "work" / "seen.txt").read_text()
    assert address.startswith("127.0.0.1:") and address != "127.0.0.1:9092"


def test_runner_reports_a_failing_block(tmp_path: Path) -> None:
    page = tmp_path / "broken.md"
    page.write_text(
        "# Broken\n\n```python\nprint('before')\n```\n\n"
        "```python\nimport sys\nprint('to stdout')\nsys.exit('the failure')\n```\n"
    )
    with pytest.raises(GuideError) as failure:
        run_page(page, tmp_path / "work")
    message = str(failure.value)
    assert "broken.md, python block at line 7 exited with status 1" in message
    assert "to stdout" in message and "the failure" in message


def test_runner_rejects_unknown_languages(tmp_path: Path) -> None:
    page = tmp_path / "bad.md"
    page.write_text("# Bad\n\n```sh\necho hi\n```\n")
    with pytest.raises(GuideError, match=r"bad.md:3: code block language 'sh'"):
        parse_page(page) and run_page(page, tmp_path / "work")
