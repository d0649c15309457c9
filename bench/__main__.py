"""``python -m bench [NAME ...]``: run benchmarks, print a table, record the results."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from bench.harness import REGISTRY, record, render
from common.tenant_wall import system_scope

# Modules whose @benchmark functions make up the suite.
MODULES = [
    "bench.api",
    "bench.engine",
    "bench.events",
    "bench.sandbox",
    "bench.background",
    "bench.budgets",
    "bench.long_threads",
    "bench.run_cost",
    "bench.idle",
    "bench.start",
    "bench.peers.suite",
]
# Run only when named: they install another server and take minutes (`make bench peers`), or
# put a probe package in the repository while they run (`make bench reload`).
ON_REQUEST = {"peers", "peers-quick", "reload"}


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")  # noqa: TID251
    for module in MODULES:
        importlib.import_module(module)
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"any of {sorted(REGISTRY)}")
    names = parser.parse_args().names or sorted(set(REGISTRY) - ON_REQUEST)
    unknown = set(names) - set(REGISTRY)
    if unknown:
        parser.error(f"unknown benchmark(s) {sorted(unknown)}; known: {sorted(REGISTRY)}")
    # The harness's own setup spans tenants; what it measures acts for its tenant as in
    # production (a drive for its thread's tenant, a request for its key's).
    with system_scope("bench"):
        rows = [row for name in names for row in REGISTRY[name]()]
    print(render(rows))
    print(f"\nrecorded in {record(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
