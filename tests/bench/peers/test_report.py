"""The peers report compares our side, figure by figure, with the strongest of the peer's
configurations, and reports A (the CPU to start a run) from the concurrency scenarios."""

from __future__ import annotations

import math

from bench.peers import report
from bench.peers.scenarios import START_MARKS_S, Outcome, Sizes


def _outcome(*, wall_s: float, cpu_s: float, start_s: float = 0.0, runs: int = 10) -> Outcome:
    return Outcome(
        runs=runs, wall_s=wall_s, latencies_s=[wall_s / runs] * runs,
        cpu_s={"server": cpu_s, "postgres": 0.0, "redis": None},
        start_cpu_s={START_MARKS_S[0]: start_s * 0.95, START_MARKS_S[-1]: start_s},
    )  # fmt: skip


def _system(wall_s: float, cpu_s: float, start_s: float = 0.0) -> list[dict[str, Outcome]]:
    return [{key: _outcome(wall_s=wall_s, cpu_s=cpu_s, start_s=start_s) for key in "abcde"}]


def test_each_figure_is_compared_with_the_peer_configuration_best_at_it() -> None:
    results = {
        report.OURS: _system(wall_s=1.0, cpu_s=0.3),
        "aegra-redis": _system(wall_s=0.5, cpu_s=0.8),  # faster, dearer
        "aegra-local": _system(wall_s=2.0, cpu_s=0.6),  # slower, cheaper
    }
    (b,) = [scenario for scenario in report.plan(Sizes()) if scenario.key == "b"]

    compared = report.compare(results, b)

    assert compared["runs/s"].strongest == "aegra-redis"  # the most runs per second
    assert compared["runs/s"].ratio == 0.5
    assert compared[report.CPU].strongest == "aegra-local"  # the least CPU per run
    assert compared[report.CPU].ratio == 0.5
    assert b.met(compared, [results[report.OURS][0]["b"]]) is False  # runs/s 0.5x < 2x


def test_without_a_peer_there_is_no_ratio_and_no_verdict() -> None:
    results = {report.OURS: _system(wall_s=1.0, cpu_s=0.3)}
    (a,) = [scenario for scenario in report.plan(Sizes()) if scenario.key == "a"]

    compared = report.compare(results, a)

    assert compared["p50 ms"].strongest is None
    assert compared["p50 ms"].ratio is None
    assert a.met(compared, [results[report.OURS][0]["a"]]) is None


def test_a_is_the_cpu_until_the_last_mark_per_run_and_says_whether_runs_had_all_started() -> None:
    settled = _outcome(wall_s=2.2, cpu_s=1.0, start_s=0.2)
    starting = Outcome(
        runs=10, wall_s=2.2, latencies_s=[2.2] * 10, cpu_s={"server": 1.0},
        start_cpu_s={START_MARKS_S[0]: 0.1, START_MARKS_S[-1]: 0.2},
    )  # fmt: skip

    assert report.start_ms_per_run(settled) == 20.0
    assert report.start_settled(settled)
    assert not report.start_settled(starting)


def test_failed_runs_are_missed_and_counted_in_the_table() -> None:
    ours = _system(wall_s=1.0, cpu_s=0.3)
    failing = Outcome(runs=10, wall_s=1.0, latencies_s=[0.1] * 9, cpu_s={"server": 0.3},
                      failed=["a run did not end with the final answer"])  # fmt: skip
    ours[0]["b"] = failing
    results = {report.OURS: ours, "aegra-local": _system(wall_s=2.0, cpu_s=0.9)}

    rows = report.rows(results, report.plan(Sizes()))
    table = report.figures_table(results, report.plan(Sizes()))

    (ours_b,) = [row for row in rows if row.case.startswith("(b)") and row.case.endswith("ours")]
    assert ours_b.measured.endswith("(MISSED: 1 runs failed)")
    assert "runs failed (all repetitions)" in table


def test_a_scenario_whose_every_run_failed_has_no_latency_but_a_row() -> None:
    ours = _system(wall_s=1.0, cpu_s=0.3)
    ours[0]["a"] = Outcome(runs=2, wall_s=1.0, latencies_s=[], cpu_s={"server": 0.1},
                           failed=["no answer", "no answer"])  # fmt: skip

    rows = report.rows({report.OURS: ours}, report.plan(Sizes()))

    (ours_a,) = [row for row in rows if row.case.startswith("(a)")]
    assert math.isnan(ours_a.p50_ms)
    assert ours_a.measured.endswith("(MISSED: 2 runs failed)")
