"""MkDocs hooks for the documentation site (``hooks:`` in mkdocs.yml).

The API reference is generated from the docstrings by mkdocstrings, whose
loader (griffe) reads the source files.  The repository maps three folders
onto one namespace (client/ -> kafkakit, broker_min/ -> kafkakit.broker,
spark/ -> kafkakit.spark); griffe understands setuptools' editable finder
only when each folder has the package's name, so it cannot find ``kafkakit``
here.  Before the build this hook lays out the same throw-away tree of
symlinks that scripts/typecheck.py gives mypy and points the python handler
at it.
"""

from __future__ import annotations

import atexit
import importlib.util
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

_SCRIPTS = Path(__file__).resolve().parent


def _build_tree(target: Path) -> Path:
    spec = importlib.util.spec_from_file_location("kafkakit_typecheck", _SCRIPTS / "typecheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    package: Path = module.build_tree(target)
    return package


@event_priority(100)  # before mkdocstrings reads its handler options
def on_config(config: Any) -> Any:
    """Lay out ``kafkakit`` as installed in a temporary directory and make it the handler's search path."""
    tmp = Path(tempfile.mkdtemp(prefix="kafkakit-docs-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    _build_tree(tmp)
    handlers = config.plugins["mkdocstrings"].config.setdefault("handlers", {})
    python = handlers.setdefault("python", {})
    python["paths"] = [str(tmp)]
    return config
