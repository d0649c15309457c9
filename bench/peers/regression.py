"""The CPU-per-run regression guard of ``make bench peers``: each of our scenarios' CPU per
run (all processes, PostgreSQL and Redis) against the newest recorded peers run measured on
a machine of comparable speed (its calibration within :data:`COMPARABLE`), and "REGRESSED"
when it grew by more than :data:`REGRESSION`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.harness import Row

REGRESSION = 0.15
COMPARABLE = 0.10
OURS_SUFFIX = ", ours"


def cpu_per_run(notes: Mapping[str, Any]) -> float | None:
    """A row's total CPU ms per run (None when a part could not be read)."""
    parts = notes.get("cpu_ms_per_run") or {}
    if not parts or any(value is None for value in parts.values()):
        return None
    return float(sum(parts.values()))


def recorded_runs(history: Path) -> list[dict[str, Any]]:
    """The recorded runs that hold peers rows, oldest first."""
    if not history.exists():
        return []
    runs = [json.loads(line) for line in history.read_text().splitlines() if line.strip()]
    return [run for run in runs if any(row["benchmark"] == "peers" for row in run["rows"])]


def last_comparable(
    runs: Iterable[Mapping[str, Any]], calibration: float, cases: Iterable[str] | None = None
) -> Mapping[str, Any] | None:
    """The newest run whose CPU calibration is within :data:`COMPARABLE` of ``calibration``
    and, when ``cases`` are given, that holds one of them (a ``peers-quick`` run's sizes
    name other cases than a full run's)."""
    wanted = set(cases) if cases is not None else None
    for run in reversed(list(runs)):
        rows = [row for row in run["rows"] if row["benchmark"] == "peers"]
        then = rows[0]["notes"].get("cpu_calibration_ms_at_start") if rows else None
        if wanted is not None and wanted.isdisjoint(row["case"] for row in rows):
            continue
        if isinstance(then, int | float) and abs(then - calibration) <= COMPARABLE * calibration:
            return run
    return None


def guarded(rows: Sequence[Row], previous: Mapping[str, Any] | None) -> list[Row]:
    """``rows`` with each of ours saying how its CPU per run compares with ``previous``'s
    same scenario: "REGRESSED" past :data:`REGRESSION`, else the change."""
    if previous is None:
        return [_said(row, "no earlier run of comparable calibration to compare CPU with")
                if row.case.endswith(OURS_SUFFIX) else row for row in rows]  # fmt: skip
    before = {row["case"]: cpu_per_run(row["notes"]) for row in previous["rows"]
              if row["benchmark"] == "peers"}  # fmt: skip
    marked = []
    for row in rows:
        now, then = cpu_per_run(row.notes), before.get(row.case)
        if not row.case.endswith(OURS_SUFFIX) or now is None or not then:
            marked.append(row)
            continue
        change = now / then - 1
        verdict = "REGRESSED: " if change > REGRESSION else ""
        marked.append(_said(row, f"{verdict}CPU/run {now:.1f} ms, {change:+.0%} vs "
                                 f"{then:.1f} ms on {previous['at']}"))  # fmt: skip
    return marked


def _said(row: Row, text: str) -> Row:
    return replace(row, measured=f"{row.measured}; {text}" if row.measured else text)
