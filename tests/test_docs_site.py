"""The documentation site builds with ``mkdocs build --strict`` and its nav lists every page.

Strict mode turns every warning into a failure: a nav entry or link to a page
that does not exist, a broken anchor, a docstring mkdocstrings cannot render.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import pytest

from tests.docs_runner import REPO, nav_pages

DOCS = REPO / "docs"


def test_every_page_is_in_the_nav() -> None:
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    listed = set(nav_pages())
    assert not pages - listed, f"docs pages missing from mkdocs.yml nav: {sorted(pages - listed)}"
    missing = sorted(listed - pages)
    assert not missing, f"mkdocs.yml nav lists pages that do not exist: {missing}"


@pytest.mark.timeout(180)
def test_site_builds_strict(tmp_path: Path) -> None:
    from mkdocs.commands.build import build
    from mkdocs.config import load_config
    from mkdocs.exceptions import Abort

    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)

    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect(level=logging.WARNING)
    logger = logging.getLogger("mkdocs")
    logger.addHandler(handler)
    started = time.monotonic()
    try:
        config = load_config(
            config_file=str(REPO / "mkdocs.yml"),
            docs_dir=str(docs),
            site_dir=str(tmp_path / "site"),
            strict=True,
        )
        try:
            build(config)
        except Abort as exc:
            warnings = "\n".join(r.getMessage() for r in records)
            pytest.fail(f"mkdocs build --strict failed: {exc}\n{warnings}")
    finally:
        logger.removeHandler(handler)
    elapsed = time.monotonic() - started
    assert not [r for r in records if r.levelno >= logging.WARNING], [r.getMessage() for r in records]
    site = tmp_path / "site"
    assert (site / "index.html").is_file()
    api = (site / "api" / "producer" / "index.html").read_text()
    assert "send_and_wait" in api, "the API reference was not generated from the docstrings"
    assert elapsed < 60, f"the site took {elapsed:.0f} s to build"
