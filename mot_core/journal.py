"""An append-only record of finished work, so an evaluation that runs for hours can stop and go on.

The acceptance evaluation (200 samples at 1024 tokens and 1,000 QA items per pair) takes hours on
a CPU; a run that is stopped, killed or out of time should not lose the samples it has scored.
One JSON object per line, never pickle: the first line holds the run's settings, every later line
one finished unit under its key. A run that reopens the journal must have the same settings, and
reuses a unit only where its digest (of the inputs it was computed from) is the same, so a
journal can never mix numbers from another translator, corpus or operating point.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mot_core.errors import MotError


class JournalMismatchError(MotError):
    """A journal was written by a run with other settings."""


def digest(*parts: str) -> str:
    """A short stable digest of some texts (what a unit was computed from)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


class Journal:
    """Finished units by key; written through to ``path`` as they come (None: kept in memory only).

    ``read_only`` reads what another run has written so far and never writes: that run may be
    appending a line at this moment, which must not be mistaken for one cut short and dropped.
    """

    def __init__(self, path: Path | None = None, settings: dict | None = None, *, read_only: bool = False) -> None:
        self.path = path
        self.settings = json.loads(json.dumps(settings or {}))  # as it reads back from the file
        self.read_only = read_only
        self._units: dict[str, dict] = {}
        if path is None:
            return
        if path.is_file():
            self._reopen(path)
        elif read_only:
            raise MotError(f"{path} does not exist: nothing has been scored there yet")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"settings": self.settings}) + "\n", encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> Journal:
        """What the journal at ``path`` holds, under the settings it was written with, read-only:
        for reading a run's records without knowing (or checking) its options."""
        header = _parse(path.read_text(encoding="utf-8").partition("\n")[0]) if path.is_file() else None
        return cls(path, (header or {}).get("settings"), read_only=True)

    def _reopen(self, path: Path) -> None:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        header = _parse(lines[0]) if lines else None
        if header is None or header.get("settings") != self.settings:
            written = (header or {}).get("settings", {})
            differ = sorted(k for k in set(written) | set(self.settings) if written.get(k) != self.settings.get(k))
            advice = "give that run's options" if self.read_only else "remove it or write elsewhere to start over"
            raise JournalMismatchError(
                f"{path} was written by a run with other settings ({', '.join(differ) or 'unreadable header'}); "
                f"{advice}"
            )
        kept = [lines[0]]
        for line in lines[1:]:
            unit = _parse(line)
            if unit is None or not {"key", "inputs", "record"} <= set(unit):  # cut short by a kill: done again
                continue
            self._units[unit["key"]] = unit
            kept.append(line)
        if not self.read_only and (len(kept) != len(lines) or not text.endswith("\n")):
            path.write_text("\n".join(kept) + "\n", encoding="utf-8")

    def __len__(self) -> int:
        return len(self._units)

    def records(self) -> dict[str, dict]:
        """Every finished unit's record by key, whatever inputs it was finished from."""
        return {key: unit["record"] for key, unit in self._units.items()}

    def get(self, key: str, inputs: str) -> dict | None:
        """The unit's record, if it was finished from the same inputs (a ``digest``)."""
        unit = self._units.get(key)
        return unit["record"] if unit is not None and unit["inputs"] == inputs else None

    def add(self, key: str, inputs: str, record: dict) -> None:
        if self.read_only:
            raise MotError(f"{self.path} is open read-only")
        unit = {"key": key, "inputs": inputs, "record": json.loads(json.dumps(record))}
        self._units[key] = unit
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(unit) + "\n")


def _parse(line: str) -> dict | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
