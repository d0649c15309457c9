"""``ThreadState``: the one class tools, hooks, effects and endpoints use on a thread, made
of its parts by concern."""

from __future__ import annotations

from threads.state.actions import ActionsMixin
from threads.state.family import FamilyMixin
from threads.state.messages import MessagesMixin
from threads.state.resources import ResourcesMixin
from threads.state.storage import StorageMixin


class ThreadState(MessagesMixin, ResourcesMixin, StorageMixin, ActionsMixin, FamilyMixin):
    """A thread, as seen by code the operator or tenant wrote."""
