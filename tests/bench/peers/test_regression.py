"""The bench's CPU-per-run guard: each of our peers rows against the newest recorded run of
comparable calibration, "REGRESSED" past 15 % more CPU per run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.harness import Row
from bench.peers.regression import guarded, last_comparable, recorded_runs

CASE = "(b) 20 x 20 runs, ours"


def _row(case: str, cpu: dict[str, float | None], calibration: float = 100.0) -> Row:
    return Row(benchmark="peers", case=case, samples=400, p50_ms=30.0, p95_ms=40.0,
               p99_ms=50.0, per_second=36.0, measured="36 runs/s (met)",
               notes={"cpu_ms_per_run": cpu,
                      "cpu_calibration_ms_at_start": calibration})  # fmt: skip


def _run(at: str, calibration: float, cpu: dict[str, float | None]) -> dict[str, Any]:
    row = _row(CASE, cpu, calibration)
    return {"at": at, "rows": [{"benchmark": row.benchmark, "case": row.case,
                                "notes": row.notes}]}  # fmt: skip


def test_more_than_fifteen_percent_more_cpu_per_run_is_regressed() -> None:
    previous = _run("2026-11-01T00:00:00Z", 100.0, {"web": 15.0, "worker": 15.0, "postgres": 10.0})
    now = [_row(CASE, {"web": 17.0, "worker": 19.0, "postgres": 11.0}),
           _row("(b) 20 x 20 runs, aegra", {"web": 60.0})]  # fmt: skip

    marked = guarded(now, previous)

    assert marked[0].measured.startswith("36 runs/s (met); REGRESSED: CPU/run 47.0 ms, +18%")
    assert "40.0 ms on 2026-11-01T00:00:00Z" in marked[0].measured
    assert marked[1].measured == "36 runs/s (met)"  # the peer's rows are not guarded


def test_within_fifteen_percent_says_the_change_and_no_comparison_says_so() -> None:
    previous = _run("2026-11-01T00:00:00Z", 100.0, {"web": 20.0, "postgres": 20.0})

    within = guarded([_row(CASE, {"web": 22.0, "postgres": 22.0})], previous)[0]
    alone = guarded([_row(CASE, {"web": 22.0, "postgres": 22.0})], None)[0]
    unreadable = guarded([_row(CASE, {"web": 22.0, "postgres": None})], previous)[0]

    assert within.measured == (
        "36 runs/s (met); CPU/run 44.0 ms, +10% vs 40.0 ms on 2026-11-01T00:00:00Z"
    )
    assert "REGRESSED" not in within.measured
    assert alone.measured.endswith("no earlier run of comparable calibration to compare CPU with")
    assert unreadable.measured == "36 runs/s (met)"


def test_only_a_run_of_comparable_calibration_is_compared_the_newest_first(tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    runs = [
        _run("2026-11-01T00:00:00Z", 100.0, {"web": 10.0}),
        _run("2026-11-02T00:00:00Z", 104.0, {"web": 11.0}),
        _run("2026-11-03T00:00:00Z", 150.0, {"web": 12.0}),  # a slower machine that day
        {"at": "2026-11-04T00:00:00Z", "rows": [{"benchmark": "api", "case": "x", "notes": {}}]},
    ]
    history.write_text("".join(json.dumps(run) + "\n" for run in runs))

    recorded = recorded_runs(history)
    found = last_comparable(recorded, 101.0)

    assert [run["at"] for run in recorded] == [run["at"] for run in runs[:3]]
    assert found is not None
    assert found["at"] == "2026-11-02T00:00:00Z"
    assert last_comparable(recorded, 200.0) is None
    assert recorded_runs(tmp_path / "absent.jsonl") == []


def test_a_run_of_other_sizes_is_passed_over_for_the_newest_holding_the_same_cases() -> None:
    full = _run("2026-11-01T00:00:00Z", 100.0, {"web": 10.0})
    quick = _run("2026-11-02T00:00:00Z", 100.0, {"web": 30.0})
    quick["rows"][0]["case"] = "(b) 2 x 3 runs, ours"

    found = last_comparable([full, quick], 100.0, [CASE])

    assert found is full
    assert last_comparable([full, quick], 100.0) is quick  # without cases: the newest
