"""Signals of the usage app.

``budget_changed`` is sent with ``tenant_id`` and ``budget_id`` after a budget is created,
changed or deleted (over the API or in the admin), inside the transaction that wrote the
change: a receiver that acts outside the database (waking paused turns) defers that with
``transaction.on_commit``.
"""

from __future__ import annotations

from django.dispatch import Signal

budget_changed = Signal()
