"""ThreadState: the one interface tools, hooks, effects and endpoints use on a thread.

Names follow the spec in snake_case (docs/threads.md maps each to the spec's
name). At rest (endpoints, effects) ``execution`` is None; the engine passes an
ExecutionState while a flow runs. Methods that need the engine raise
NotAvailable until that part of the platform exists.

Modules: ``execution`` (ExecutionState, MessagesResult), ``base`` (the thread, the
running flow, identity), then ``ThreadState``'s parts by concern: ``messages`` (messages
and logs), ``resources`` (definitions and env), ``storage`` (KV and files), ``actions``
(events, tools, code, terminate, stop_session), joined in ``thread_state``.
"""

from threads.state.execution import ExecutionState, MessagesResult
from threads.state.thread_state import ThreadState

__all__ = ["ExecutionState", "MessagesResult", "ThreadState"]
