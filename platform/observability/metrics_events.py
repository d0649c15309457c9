"""The engine's facts as metrics, read from the events it commits: each batch the broadcaster
sends (:func:`threads.broadcast.observe`) updates the turn, model, tool, takeover and fan-out
families. Nothing here reads the database; every figure is in an envelope (its
``timestamp`` and ``tenant_id``) or its payload (:mod:`threads.events.payloads`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from observability.families import Families, families, tenant_labels
from threads.events.vocabulary import EventType

Envelope = Mapping[str, Any]
# ``runtime.warning`` codes of a recovered turn (threads.services.recovery.incident_record).
TAKEOVER_CODES: Final = frozenset({"takeover", "outage"})
US: Final = 1_000_000
# Model ids come from tenants' definitions: past this many distinct (provider, model) pairs
# in a process, the rest share ``model="other"``, so no tenant can grow the series unbounded.
MAX_MODELS: Final = 100
_models_seen: set[tuple[str, str]] = set()


def events_observed(envelopes: Sequence[Envelope], lag_s: float) -> None:
    """Record what ``envelopes`` (just sent, the oldest ``lag_s`` after its commit) tell."""
    found = families()
    found.fanout_lag.observe(max(0.0, lag_s))
    for envelope in envelopes:
        record = RECORDERS.get(envelope.get("type", ""))
        if record is not None:
            record(found, envelope, envelope.get("payload") or {})


def _turn_started(found: Families, envelope: Envelope, payload: Mapping[str, Any]) -> None:
    resumed = bool(payload.get("resumed"))
    tenant = tenant_labels(envelope.get("tenant_id"))
    found.turns_started.labels(resumed=str(resumed).lower(), **tenant).inc()
    created_at = payload.get("created_at")
    if not resumed and isinstance(created_at, int):
        wait = found.turn_queue_wait.labels(**tenant) if tenant else found.turn_queue_wait
        wait.observe(_seconds(envelope, created_at))


def _turn_ended(found: Families, envelope: Envelope, payload: Mapping[str, Any]) -> None:
    outcome = str(payload.get("status") or "unknown")
    tenant = tenant_labels(envelope.get("tenant_id"))
    reason = str(payload.get("reason") or "unknown")
    found.turns_finished.labels(outcome=outcome, reason=reason, **tenant).inc()
    started_at = payload.get("started_at")
    if isinstance(started_at, int):
        found.turn_duration.labels(outcome=outcome, **tenant).observe(
            _seconds(envelope, started_at)
        )


def _model_ended(found: Families, envelope: Envelope, payload: Mapping[str, Any]) -> None:
    labels = _model(envelope, payload)
    if envelope.get("type") == EventType.MODEL_COMPLETED:
        outcome = "completed"
    else:
        outcome = "aborted" if payload.get("aborted") else "failed"
    found.model_calls.labels(outcome=outcome, **labels).inc()
    latency_ms = payload.get("latency_ms")
    if isinstance(latency_ms, int | float):
        found.model_duration.labels(**labels).observe(max(0.0, latency_ms / 1000))


def _cost_recorded(found: Families, envelope: Envelope, payload: Mapping[str, Any]) -> None:
    labels = _model(envelope, payload)
    for kind in ("input", "output", "cached"):
        tokens = payload.get(f"{kind}_tokens")
        if isinstance(tokens, int) and tokens > 0:
            found.model_tokens.labels(kind=kind, **labels).inc(tokens)
    cost = payload.get("cost_micros")
    if isinstance(cost, int) and cost > 0 and payload.get("currency") == "USD":
        found.model_cost.labels(**labels).inc(cost / US)


def _tool_ended(found: Families, envelope: Envelope, payload: Mapping[str, Any]) -> None:
    fallback = "success" if envelope.get("type") == EventType.TOOL_RESULT else "error"
    outcome = str(payload.get("status") or fallback)
    found.tool_calls.labels(outcome=outcome, **tenant_labels(envelope.get("tenant_id"))).inc()


def _warned(found: Families, envelope: Envelope, payload: Mapping[str, Any]) -> None:
    code = payload.get("code")
    if code in TAKEOVER_CODES:
        found.takeovers.labels(kind=str(code), **tenant_labels(envelope.get("tenant_id"))).inc()


def _model(envelope: Envelope, payload: Mapping[str, Any]) -> dict[str, str]:
    """A model family's labels: the provider and its model id (never the tenant's own model
    name), at most :data:`MAX_MODELS` pairs per process."""
    provider = str(payload.get("provider") or "unknown")
    model = str(payload.get("model_id") or "unknown")[:100]
    if (provider, model) not in _models_seen:
        if len(_models_seen) >= MAX_MODELS:
            model = "other"
        else:
            _models_seen.add((provider, model))
    return {"provider": provider, "model": model, **tenant_labels(envelope.get("tenant_id"))}


def _seconds(envelope: Envelope, since_us: int) -> float:
    """Seconds from ``since_us`` to the envelope's timestamp (never negative)."""
    return max(0.0, (int(envelope.get("timestamp") or 0) - since_us) / US)


Recorder = Callable[[Families, Envelope, Mapping[str, Any]], None]
RECORDERS: Final[dict[str, Recorder]] = {
    EventType.TURN_STARTED: _turn_started,
    EventType.TURN_COMPLETED: _turn_ended,
    EventType.TURN_FAILED: _turn_ended,
    EventType.TURN_CANCELLED: _turn_ended,
    EventType.MODEL_COMPLETED: _model_ended,
    EventType.MODEL_FAILED: _model_ended,
    EventType.COST_RECORDED: _cost_recorded,
    EventType.TOOL_RESULT: _tool_ended,
    EventType.TOOL_FAILED: _tool_ended,
    EventType.RUNTIME_WARNING: _warned,
}
