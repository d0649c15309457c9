"""Operating-system limits a runner process puts on itself before it serves guest code.

``confine`` runs first thing in ``python -m sandbox.runner``, while the process still has
a single thread, and applies, each on a best-effort basis:

1. ``network``: ``unshare(CLONE_NEWUSER | CLONE_NEWNET)`` (``CLONE_NEWNET`` alone as a
   fallback), which leaves the process with a loopback interface that is down. Must run
   before any thread starts (the kernel refuses a new user namespace to a threaded
   process).
2. ``parent_death``: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, then a check that the parent
   is still the pid the host passed in argv (it may have died before prctl ran). The
   kernel sends the signal when the *thread* that forked the runner ends, which is why
   the pool forks from one thread that lives as long as the pool (``sandbox.pool``).
   Without prctl, a watchdog thread polls ``getppid()`` instead. It works while guest
   code spins: the quickjs binding releases the GIL while QuickJS runs (eval, module,
   function calls and pending jobs alike; measured: a Python thread kept counting at
   full speed through a one-second ``for(;;){}``), so the watchdog gets its turn.
3. ``no_new_privs``: ``prctl(PR_SET_NO_NEW_PRIVS, 1)``.
4. resource limits: ``address_space_bytes`` (RLIMIT_AS, from the host), ``core_bytes``
   and ``file_size_bytes`` 0 (RLIMIT_CORE, RLIMIT_FSIZE; the latter is skipped when
   stderr is a regular file, since the runner's diagnostics would then fail to write),
   and ``cpu_seconds``: a per-execution budget, see ``Confinement.arm_cpu``.

A limit that cannot be applied never stops the runner: ``Confinement.refused`` says why,
and the runner reports ``applied`` and ``refused`` in its ``ready`` message.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import math
import os
import resource
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from sandbox.protocol import ConfinementReport

# Defaults for RunnerPool; settings pass their own values down through argv.
DEFAULT_CPU_LIMIT_SECONDS: Final = 60.0
DEFAULT_ADDRESS_SPACE_LIMIT_MB: Final = 1024
# A runner maps about 180 MiB idle and 250 MiB at its warm-up peak (interpreter, QuickJS,
# tree-sitter, thread stacks, malloc arenas); much below this it cannot even start.
MIN_ADDRESS_SPACE_LIMIT_MB: Final = 320
# The kernel's RLIMIT_CPU backstop fires this long after the interrupt handler's budget,
# so that a guest QuickJS can interrupt is stopped cleanly first.
CPU_KILL_MARGIN_SECONDS: Final = 1.0
WATCHDOG_INTERVAL_SECONDS: Final = 0.25

_PR_SET_PDEATHSIG: Final = 1
_PR_SET_NO_NEW_PRIVS: Final = 38
_CLONE_NEWUSER: Final = 0x10000000
_CLONE_NEWNET: Final = 0x40000000


@dataclass(frozen=True)
class CpuBudget:
    """One execution's CPU time: past ``deadline`` (``time.process_time()``) the engine's
    interrupt handler stops guest code."""

    seconds: float
    deadline: float

    def exceeded(self) -> bool:
        return time.process_time() > self.deadline


@dataclass
class Confinement:
    """What ``confine`` applied and what the platform refused (name -> reason)."""

    cpu_seconds: float | None = None
    applied: dict[str, Any] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)

    def report(self) -> ConfinementReport:
        return {"applied": dict(self.applied), "refused": dict(self.refused)}

    def arm_cpu(self) -> CpuBudget | None:
        """Start one execution's CPU budget.

        RLIMIT_CPU counts the whole life of the process, so its soft limit is moved to
        the CPU used so far plus the budget plus ``CPU_KILL_MARGIN_SECONDS``: a guest that
        escapes the interrupt handler (a native sort) gets SIGXCPU, which ends the
        process, and the pool replaces it. The hard limit is left alone so the next
        execution can move the soft one again.
        """
        if self.cpu_seconds is None:
            return None
        used = time.process_time()
        if "cpu_seconds" in self.applied:
            with contextlib.suppress(OSError, ValueError):  # it worked at start-up
                _set_cpu_limit(used + self.cpu_seconds + CPU_KILL_MARGIN_SECONDS)
        return CpuBudget(self.cpu_seconds, used + self.cpu_seconds)


def confine(
    *, parent_pid: int, address_space_bytes: int | None, cpu_seconds: float | None
) -> Confinement:
    """Apply every limit this platform allows; see the module docstring for the order."""
    confinement = Confinement(cpu_seconds=cpu_seconds)
    libc = _libc()
    _isolate_network(libc, confinement)
    _die_with_parent(libc, parent_pid, confinement)
    _no_new_privs(libc, confinement)
    if address_space_bytes is not None:
        _limit(confinement, "address_space_bytes", resource.RLIMIT_AS, address_space_bytes)
    _limit(confinement, "core_bytes", resource.RLIMIT_CORE, 0)
    if _is_regular_file(2):
        confinement.refused["file_size_bytes"] = "stderr is a regular file (writes would fail)"
    else:
        _limit(confinement, "file_size_bytes", resource.RLIMIT_FSIZE, 0)
    if cpu_seconds is not None:
        try:  # warm-up runs under the budget too
            _set_cpu_limit(time.process_time() + cpu_seconds + CPU_KILL_MARGIN_SECONDS)
            confinement.applied["cpu_seconds"] = cpu_seconds
        except (OSError, ValueError) as error:  # the interrupt handler still applies it
            confinement.refused["cpu_seconds"] = f"setrlimit(RLIMIT_CPU): {error}"
    return confinement


def watch_parent(
    parent_pid: int,
    *,
    interval: float = WATCHDOG_INTERVAL_SECONDS,
    on_orphaned: Callable[[], object] | None = None,
) -> threading.Thread:
    """A daemon thread that calls ``on_orphaned`` (default: exit at once) as soon as the
    process's parent is no longer ``parent_pid``. The fallback where prctl is missing."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        (on_orphaned or _exit_orphaned)()

    thread = threading.Thread(target=watch, name="runner-parent-watchdog", daemon=True)
    thread.start()
    return thread


def _exit_orphaned() -> None:
    os._exit(0)


def _libc() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None


def _call(libc: Any, name: str, *args: int) -> str | None:
    """Call a libc function that returns -1 on failure; None when it worked, else why not."""
    function = getattr(libc, name, None) if libc is not None else None
    if function is None:
        return f"{name}() is not available on {sys.platform}"
    if function(*args) != 0:
        errno = ctypes.get_errno()
        return f"{name}(): {os.strerror(errno)} (errno {errno})"
    return None


def _isolate_network(libc: Any, confinement: Confinement) -> None:
    refusal = _call(libc, "unshare", _CLONE_NEWUSER | _CLONE_NEWNET)
    if refusal is None:
        confinement.applied["network"] = "none (new user and network namespaces)"
        return
    if _call(libc, "unshare", _CLONE_NEWNET) is None:
        confinement.applied["network"] = "none (new network namespace)"
        return
    confinement.refused["network"] = refusal


def _die_with_parent(libc: Any, parent_pid: int, confinement: Confinement) -> None:
    refusal = _call(libc, "prctl", _PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if refusal is None:
        confinement.applied["parent_death"] = "prctl(PR_SET_PDEATHSIG, SIGKILL)"
    else:
        confinement.refused["parent_death_signal"] = refusal
        confinement.applied["parent_death"] = "watchdog thread"
        watch_parent(parent_pid)
    # The parent may have died before prctl ran: the signal would then never come.
    if os.getppid() != parent_pid:
        _exit_orphaned()


def _no_new_privs(libc: Any, confinement: Confinement) -> None:
    refusal = _call(libc, "prctl", _PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if refusal is None:
        confinement.applied["no_new_privs"] = True
    else:
        confinement.refused["no_new_privs"] = refusal


def _limit(confinement: Confinement, name: str, which: int, value: int) -> None:
    try:
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))
        confinement.applied[name] = value
    except (OSError, ValueError) as error:
        confinement.refused[name] = f"setrlimit: {error}"


def _set_cpu_limit(seconds: float) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(seconds)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _is_regular_file(fd: int) -> bool:
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return False
