"""The benchmark registry, the table printer and the results file.

A benchmark is a function returning rows of measurements; register it with
``@benchmark("name")`` in a module listed in ``bench.__main__.MODULES``.
Numbers are wall-clock on whatever machine runs them: compare ratios within one
run, not absolute values across machines.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tenancy.models import Tenant

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@contextmanager
def bench_tenant(prefix: str) -> Iterator[Tenant]:
    """Django set up and migrated, and a fresh tenant that is deleted afterwards."""
    import django

    django.setup()
    from django.core.management import call_command

    from tenancy.models import Tenant
    from tenancy.services import tenant_create

    call_command("migrate", verbosity=0)
    tenant = tenant_create(slug=f"{prefix}-{uuid.uuid4().hex[:8]}")
    try:
        yield tenant
    finally:
        Tenant.objects.filter(id=tenant.id).delete()


def cpu_calibration_ms() -> float:
    """How long this machine takes, now, for a fixed pure-Python workload (best of three).

    Shared and virtual machines change speed over minutes; comparing a run's figures with
    its calibration tells a slower machine from a slower engine."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for number in range(1_000_000):
            total += number * number % 7
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 1)


@dataclass(frozen=True)
class Row:
    benchmark: str
    case: str
    samples: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    per_second: float
    target: str = ""
    notes: dict[str, object] = field(default_factory=dict)
    measured: str = ""  # the headline against the target, when p50 and ops/s do not say it


Benchmark = Callable[[], Sequence[Row]]
REGISTRY: dict[str, Benchmark] = {}


def benchmark(name: str) -> Callable[[Benchmark], Benchmark]:
    def register(function: Benchmark) -> Benchmark:
        REGISTRY[name] = function
        return function

    return register


def summarize(
    benchmark_name: str,
    case: str,
    latencies_s: Sequence[float],
    elapsed_s: float,
    target: str = "",
    **notes: object,
) -> Row:
    """A row from per-operation latencies (seconds) and the wall time they took."""
    ordered = sorted(latencies_s)
    quantiles = statistics.quantiles(ordered, n=100, method="inclusive")
    return Row(
        benchmark=benchmark_name,
        case=case,
        samples=len(ordered),
        p50_ms=round(statistics.median(ordered) * 1000, 3),
        p95_ms=round(quantiles[94] * 1000, 3),
        p99_ms=round(quantiles[98] * 1000, 3),
        per_second=round(len(ordered) / elapsed_s, 1),
        target=target,
        notes=dict(notes),
    )


def render(rows: Sequence[Row]) -> str:
    headers = ["benchmark", "case", "n", "p50 ms", "p95 ms", "p99 ms", "ops/s", "target",
               "measured"]  # fmt: skip
    table = [
        [r.benchmark, r.case, str(r.samples), f"{r.p50_ms:.2f}", f"{r.p95_ms:.2f}",
         f"{r.p99_ms:.2f}", f"{r.per_second:.0f}", r.target, r.measured]
        for r in rows
    ]  # fmt: skip
    widths = [max(len(h), *(len(line[i]) for line in table)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in table]
    return "\n".join(lines)


def record(rows: Sequence[Row]) -> Path:
    """Write ``results/latest.json`` and append the run to ``results/history.jsonl``."""
    RESULTS_DIR.mkdir(exist_ok=True)
    run = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "rows": [asdict(row) for row in rows],
    }
    latest = RESULTS_DIR / "latest.json"
    latest.write_text(json.dumps(run, indent=2) + "\n")
    with (RESULTS_DIR / "history.jsonl").open("a") as history:
        history.write(json.dumps(run) + "\n")
    return latest
