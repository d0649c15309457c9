"""A host process for the parent-death tests: ``python -m tests.sandbox.orphan_host MODE``.

It starts a runner, has it spin in ``for(;;){}``, prints one JSON line and waits to be
killed: ``runner`` (its pid), ``holder`` (the pid of a ``sleep`` that holds the runner's
stdin open, as a child the host forked would: so the runner cannot learn of its host's
death from end-of-file) and ``parent_death`` (how the runner said it would die with its
parent). MODE ``pool`` uses a ``RunnerPool``; MODE ``watchdog`` starts one runner by hand
with ``prctl(PR_SET_PDEATHSIG)`` made to fail, so that only the fallback watchdog thread
can end the orphan.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from sandbox import RunnerPool, protocol
from sandbox.options import prepare

SPIN = "for (;;) {}"
# Run as the runner: refuses PR_SET_PDEATHSIG as a platform without prctl would.
WITHOUT_PRCTL = """
import sys
from sandbox import confine, runner
real_call = confine._call
def call(libc, name, *args):
    if name == "prctl" and args[0] == confine._PR_SET_PDEATHSIG:
        return "prctl() is not available (test)"
    return real_call(libc, name, *args)
confine._call = call
sys.exit(runner.main(sys.argv[1:]))
"""


def with_pool() -> None:
    pool = RunnerPool(1)
    pool.wait_ready()
    execution = pool.run_code(SPIN)
    while execution.runner_pid is None:
        time.sleep(0.005)
    (runner,) = pool._all
    assert runner.process.stdin is not None
    assert pool.confinement is not None
    parent_death = pool.confinement["applied"]["parent_death"]
    _announce(runner.pid, runner.process.stdin.fileno(), parent_death)


def with_watchdog() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", WITHOUT_PRCTL, "--parent", str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={},
    )
    assert process.stdin is not None
    assert process.stdout is not None
    ready = protocol.loads(process.stdout.readline())
    execute = {"type": "execute", "id": "spin", "payload": prepare(SPIN, None).payload}
    process.stdin.write(protocol.dumps(execute))
    process.stdin.flush()
    assert protocol.loads(process.stdout.readline())["type"] == "started"
    parent_death = ready["confinement"]["applied"]["parent_death"]
    _announce(process.pid, process.stdin.fileno(), parent_death)


def _announce(runner: int, runner_stdin: int, parent_death: str) -> None:
    holder = subprocess.Popen(["sleep", "600"], pass_fds=[runner_stdin])
    print(json.dumps({"runner": runner, "holder": holder.pid, "parent_death": parent_death}))
    sys.stdout.flush()
    time.sleep(600)  # until the test kills this process


if __name__ == "__main__":
    {"pool": with_pool, "watchdog": with_watchdog}[sys.argv[1]]()
