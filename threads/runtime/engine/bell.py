"""The inputs bell: an input joined a running turn (``multitask_strategy=join``). The
lock holder's heartbeat rings it on the ``inputs`` control signal and the flow's next drain
(:func:`threads.runtime.engine.drain.inputs_drain`) answers it by reading the inbox, so a
flow reads its inbox only when something was queued for it. Process-local: the heartbeat
and the flow of a thread run in the same worker."""

from __future__ import annotations

import threading
from typing import Any

_rung: set[str] = set()
_guard = threading.Lock()


def inputs_ring(thread_id: Any) -> None:
    with _guard:
        _rung.add(str(thread_id))


def inputs_rung(thread_id: Any) -> bool:
    """Whether the bell rang for the thread since the last answer (the ring is consumed)."""
    with _guard:
        if str(thread_id) not in _rung:
            return False
        _rung.discard(str(thread_id))
        return True
