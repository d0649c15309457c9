"""Figures of every system side by side: the printed tables and the harness rows.

Each figure is the median over repetitions of that repetition's value. Our side is
compared, figure by figure, with the strongest peer configuration for that figure (the
lowest latency, CPU or wall time, the most runs per second): ``ours/best`` is the ratio of
the medians, and ``paired`` the median of the per-repetition ratios against that peer (the
systems ran back to back in each repetition, so paired ratios cancel slow drifts of the
machine). CPU per run is the CPU seconds a part spent during the scenario over the runs it
made; A, in the concurrency scenarios, the CPU of every part from the start until
:data:`START_MARK_S` (before any model call can have ended) over the runs: the cost of
starting a run, from its first request to its first model call.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from bench.harness import Row
from bench.peers.scenarios import START_MARKS_S, Outcome, Sizes
from bench.peers.workload import SLOW_MODEL_S

OURS = "ours"
IDEAL_S = 2 * SLOW_MODEL_S
CPU = "CPU ms/run"
START = "A ms/run"
START_MARK_S = START_MARKS_S[-1]
HIGHER_IS_BETTER = frozenset({"runs/s", "messages kept"})

Repetition = Mapping[str, Outcome]  # one repetition of one system: scenario key -> outcome
Results = Mapping[str, Sequence[Repetition]]  # system -> its repetitions


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile; NaN when no run ended well (every one failed)."""
    if len(values) <= 1:
        return values[0] if values else math.nan
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def p50_ms(outcome: Outcome) -> float:
    return quantile(outcome.latencies_s, 0.5) * 1000


def p95_ms(outcome: Outcome) -> float:
    return quantile(outcome.latencies_s, 0.95) * 1000


def runs_per_s(outcome: Outcome) -> float:
    return outcome.runs / outcome.wall_s


def wall_s(outcome: Outcome) -> float:
    return outcome.wall_s


def kept(outcome: Outcome) -> float:
    return float(outcome.kept or 0)


def start_ms_per_run(outcome: Outcome) -> float:
    """A: the CPU of every part until :data:`START_MARK_S`, per run."""
    return outcome.start_cpu_s.get(START_MARK_S, 0.0) * 1000 / outcome.runs


def start_settled(outcome: Outcome) -> bool:
    """Whether the runs had all started by :data:`START_MARK_S`: almost no CPU (under 10 %)
    was spent between the first mark and the last."""
    first = outcome.start_cpu_s.get(START_MARKS_S[0], 0.0)
    last = outcome.start_cpu_s.get(START_MARK_S, 0.0)
    return last > 0 and (last - first) < 0.1 * last


def cpu_ms_per_run(outcome: Outcome, part: str | None = None) -> float:
    """One part's CPU per run, or all parts' (an unreadable part counts as zero)."""
    parts = [part] if part else list(outcome.cpu_s)
    return sum(outcome.cpu_s.get(one) or 0.0 for one in parts) * 1000 / outcome.runs


@dataclass(frozen=True)
class Compared:
    """One figure of one scenario, per repetition, for our side and each peer configuration
    that ran; ``peer`` is the strongest one's."""

    ours: list[float]
    peers: Mapping[str, list[float]]
    higher_is_better: bool = False

    @property
    def strongest(self) -> str | None:
        """The peer configuration with the best median, None when no peer ran."""
        medians = {name: statistics.median(values) for name, values in self.peers.items()
                   if values}  # fmt: skip
        if not medians:
            return None
        best = max if self.higher_is_better else min
        return best(medians, key=medians.__getitem__)

    @property
    def peer(self) -> list[float]:
        return list(self.peers[self.strongest]) if self.strongest else []

    @property
    def ratio(self) -> float | None:
        if not self.peer or not self.ours or statistics.median(self.peer) == 0:
            return None
        return statistics.median(self.ours) / statistics.median(self.peer)

    @property
    def paired(self) -> float | None:
        pairs = [o / p for o, p in zip(self.ours, self.peer, strict=False) if p]
        return statistics.median(pairs) if pairs else None


Check = Callable[[Mapping[str, Compared], Sequence[Outcome]], bool | None]
Headline = Callable[[Mapping[str, Compared], Sequence[Outcome]], str]


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    figures: Sequence[tuple[str, Callable[[Outcome], float]]]
    target: str  # the acceptance for our side
    met: Check  # whether our side meets it (None: it needs the peer, which did not run)
    headline: Headline  # our side's figure against the target


def _ratio_at_most(figure: str, limit: float) -> Check:
    return lambda compared, _: None if (r := compared[figure].ratio) is None else r <= limit


def _faster_and_cheaper(compared: Mapping[str, Compared], _: Sequence[Outcome]) -> bool | None:
    speed, cpu = compared["runs/s"].ratio, compared[CPU].ratio
    return None if speed is None or cpu is None else speed >= 2 and cpu <= 0.5


def _all_kept(_: Mapping[str, Compared], outcomes: Sequence[Outcome]) -> bool:
    return all(o.kept == o.expected and o.in_order and not o.failed for o in outcomes)


def _wall_within(factor: float) -> Check:
    return lambda compared, _: statistics.median(compared["wall s"].ours) <= factor * IDEAL_S


def _ratio_headline(figure: str) -> Headline:
    def headline(compared: Mapping[str, Compared], _: Sequence[Outcome]) -> str:
        one = compared[figure]
        return f"{figure} {_ratio(one.ratio)}x {one.strongest or 'the peer (did not run)'}"

    return headline


def _kept_headline(_: Mapping[str, Compared], outcomes: Sequence[Outcome]) -> str:
    return _kept(outcomes)


def _ideal_headline(compared: Mapping[str, Compared], outcomes: Sequence[Outcome]) -> str:
    wall = statistics.median(compared["wall s"].ours)
    start = statistics.median(compared[START].ours)
    settled = "" if all(start_settled(o) for o in outcomes) else " (runs still starting)"
    return f"{wall:.2f} s = {wall / IDEAL_S:.2f}x ideal, A {start:.1f} ms{settled}"


def plan(sizes: Sizes) -> list[Scenario]:
    """The five scenarios of issue 15 at the given sizes."""
    ideal = f"1 s model (ideal {IDEAL_S:.1f} s)"
    return [
        Scenario("a", f"(a) {sizes.sequential} sequential runs", [("p50 ms", p50_ms),
                 ("p95 ms", p95_ms)], "p50 <= 0.5x Aegra's", _ratio_at_most("p50 ms", 0.5),
                 _ratio_headline("p50 ms")),
        Scenario("b", f"(b) {sizes.clients} clients x {sizes.runs_per_client} runs",
                 [("runs/s", runs_per_s), ("p50 ms", p50_ms), ("p95 ms", p95_ms)],
                 "runs/s >= 2x Aegra's, CPU/run <= 0.5x", _faster_and_cheaper,
                 _ratio_headline("runs/s")),
        Scenario("c", f"(c) {sizes.burst} messages back to back on one thread",
                 [("wall s", wall_s), ("messages kept", kept)],
                 "every run kept, in order", _all_kept, _kept_headline),
        Scenario("d", f"(d) {sizes.concurrent} concurrent runs, {ideal}",
                 [("wall s", wall_s), ("p50 ms", p50_ms), (START, start_ms_per_run)],
                 "wall <= 1.25x ideal", _wall_within(1.25), _ideal_headline),
        Scenario("e", f"(e) {sizes.concurrent_large} concurrent runs, {ideal}",
                 [("wall s", wall_s), ("p50 ms", p50_ms), (START, start_ms_per_run)],
                 "wall <= 2.0x ideal", _wall_within(2.0), _ideal_headline),
    ]  # fmt: skip


def peers(results: Results) -> list[str]:
    """The peer configurations, in the order they ran first."""
    return [name for name in results if name != OURS]


def compare(results: Results, scenario: Scenario) -> dict[str, Compared]:
    """Every figure of ``scenario``, and its total CPU per run, for every system."""
    figures: list[tuple[str, Callable[[Outcome], float]]] = [
        *scenario.figures,
        (CPU, cpu_ms_per_run),
    ]
    return {
        label: Compared(
            [figure(rep[scenario.key]) for rep in results[OURS]],
            {name: [figure(rep[scenario.key]) for rep in results[name]] for name in peers(results)},
            higher_is_better=label in HIGHER_IS_BETTER,
        )
        for label, figure in figures
    }


def cpu_parts(reps: Sequence[Repetition], key: str) -> dict[str, float | None]:
    """Median CPU ms per run of each part of a system in scenario ``key``; None for a part
    that could not be read (see :mod:`bench.peers.cpu`)."""
    return {
        name: None
        if any(rep[key].cpu_s[name] is None for rep in reps)
        else statistics.median(cpu_ms_per_run(rep[key], name) for rep in reps)
        for name in reps[0][key].cpu_s
    }


def kept_text(reps: Sequence[Repetition], key: str) -> str:
    return _kept([rep[key] for rep in reps]) if reps else "-"


def _kept(outcomes: Sequence[Outcome]) -> str:
    """E.g. ``11-19 of 80 kept, in order 0/3``."""
    counts = sorted(o.kept or 0 for o in outcomes)
    span = f"{counts[0]}" if counts[0] == counts[-1] else f"{counts[0]}-{counts[-1]}"
    ordered = sum(bool(o.in_order) for o in outcomes)
    failed = sum(len(o.failed) for o in outcomes)
    return (f"{span} of {outcomes[0].expected} kept, in order {ordered}/{len(outcomes)}"
            + (f", {failed} runs failed" if failed else ""))  # fmt: skip


# Printing --------------------------------------------------------------------------------------


def _number(values: Sequence[float]) -> str:
    if not values:
        return "-"
    value = statistics.median(values)
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _align(lines: Sequence[Sequence[str]]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                     for line in lines)  # fmt: skip


def figures_table(results: Results, scenarios: Sequence[Scenario]) -> str:
    names = peers(results)
    lines = [["figure (median of repetitions)", OURS, *names, "ours/best", "paired", "best"]]
    for scenario in scenarios:
        for label, compared in compare(results, scenario).items():
            lines.append([f"{scenario.title}, {label}", _number(compared.ours),
                          *(_number(compared.peers[name]) for name in names),
                          _ratio(compared.ratio), _ratio(compared.paired),
                          compared.strongest or "-"])  # fmt: skip
        if scenario.key == "c":
            kept = [kept_text(results[name], "c") for name in [OURS, *names]]
            lines.append([f"{scenario.title}, order", *kept, "", "", ""])
        elif any(rep[scenario.key].failed for reps in results.values() for rep in reps):
            failed = [str(sum(len(rep[scenario.key].failed) for rep in results[name]))
                      for name in [OURS, *names]]  # fmt: skip
            lines.append([f"{scenario.title}, runs failed (all repetitions)", *failed, "", "", ""])
    return _align(lines)


def cpu_table(results: Results, scenarios: Sequence[Scenario]) -> str:
    lines = [["CPU ms per run", "system", "processes", "postgres", "redis", "total"]]
    for scenario in scenarios:
        for system, reps in results.items():
            if reps:
                parts = cpu_parts(reps, scenario.key)
                postgres, redis = parts.pop("postgres"), parts.pop("redis")
                processes = ", ".join(f"{name} {_ms(value)}" for name, value in parts.items())
                total = sum(value or 0.0 for value in [*parts.values(), postgres, redis])
                lines.append([scenario.title.split(" ", 1)[0], system, processes, _ms(postgres),
                              _ms(redis), f"{total:.1f}"])  # fmt: skip
    return _align(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


# Recording -------------------------------------------------------------------------------------


def rows(results: Results, scenarios: Sequence[Scenario], **notes: object) -> list[Row]:
    """One harness row per scenario and system; ours carries the ratios and the target."""
    return [
        _row(scenario, system, reps, compare(results, scenario), notes)
        for scenario in scenarios
        for system, reps in results.items()
        if reps
    ]


def _verdict(
    scenario: Scenario, compared: Mapping[str, Compared], outcomes: Sequence[Outcome]
) -> str:
    met = scenario.met(compared, outcomes)
    failed = sum(len(o.failed) for o in outcomes)
    if failed and scenario.key != "c":  # (c) counts its failures in what it keeps
        return f"{scenario.headline(compared, outcomes)} (MISSED: {failed} runs failed)"
    verdict = "" if met is None else f" ({'met' if met else 'MISSED'})"
    return scenario.headline(compared, outcomes) + verdict


def _row(
    scenario: Scenario, system: str, reps: Sequence[Repetition],
    compared: Mapping[str, Compared], notes: Mapping[str, object],
) -> Row:  # fmt: skip
    outcomes = [rep[scenario.key] for rep in reps]
    mine = {label: c.ours if system == OURS else c.peers[system] for label, c in compared.items()}
    row_notes: dict[str, object] = {
        "per_repetition": {label: [round(v, 3) for v in values] for label, values in mine.items()},
        "cpu_ms_per_run": {k: _rounded(v) for k, v in cpu_parts(reps, scenario.key).items()},
        **notes,
    }
    if scenario.key == "c":
        row_notes["kept"] = _kept(outcomes)
    failed = [error for o in outcomes for error in o.failed]
    row_notes["failed_runs"] = {"count": len(failed), "first": failed[:5]}
    if system == OURS:
        row_notes["strongest_peer"] = {k: c.strongest for k, c in compared.items()}
        row_notes["ours_over_strongest"] = {k: _rounded(c.ratio) for k, c in compared.items()}
        row_notes["paired_ours_over_strongest"] = {
            k: _rounded(c.paired) for k, c in compared.items()
        }
    return Row(
        benchmark="peers",
        case=f"{scenario.title}, {system}",
        samples=sum(o.runs for o in outcomes),
        p50_ms=round(statistics.median(p50_ms(o) for o in outcomes), 3),
        p95_ms=round(statistics.median(p95_ms(o) for o in outcomes), 3),
        p99_ms=round(statistics.median(quantile(o.latencies_s, 0.99) * 1000 for o in outcomes), 3),
        per_second=round(statistics.median(runs_per_s(o) for o in outcomes), 2),
        target=scenario.target if system == OURS else "",
        notes=row_notes,
        measured=_verdict(scenario, compared, outcomes) if system == OURS else "",
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
