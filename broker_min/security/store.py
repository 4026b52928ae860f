"""A small JSON document kept durably on disk: written to a temporary file, fsynced, renamed.

SCRAM credentials and ACLs are cluster metadata; on a single node they live in
``<data dir>/.kafkakit-security/``.  Writes are rare (admin operations), so the whole
document is rewritten each time, which keeps a crash from leaving half a file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class JsonDocument:
    """One JSON file: :meth:`load` reads it (or the default), :meth:`save` replaces it atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, default: Any) -> Any:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return default

    def save(self, document: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(self.path.suffix + ".tmp")
        with open(temporary, "w") as handle:
            json.dump(document, handle, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
