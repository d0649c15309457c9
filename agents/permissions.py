"""Permission rules for tool calls: ``allow``, ``ask`` or ``deny``, each optionally limited by
a condition on the call's arguments.

A rule comes from a registry tool's default (``@tool(approval=...)``), a prompt's
``tools[]`` entry (``approval``) or the tenant's own rules (per agent and tool,
:mod:`agents.permission_rules`). Every rule that applies to a call is weighed and the most
restrictive wins: ``deny`` over ``ask`` over ``allow``, so a deny or ask can never be
overridden by an allow. A call no rule applies to is allowed.

Conditions are a small JSON-logic subset, data only (nothing is evaluated as code):

* ``{"var": "a.b"}``: the argument at that dotted path (``null`` when missing);
* literals: numbers, strings, booleans, ``null``, lists of literals;
* ``{"==": [x, y]}``, ``!=``, ``<``, ``<=``, ``>``, ``>=``: comparisons (an ordering of a
  number with a non-number, or of mismatched types, is false);
* ``{"and": [...]}``, ``{"or": [...]}``, ``{"!": x}``;
* ``{"in": [x, y]}``: ``x`` is an element of the list ``y``, or a substring of the string ``y``.

An ``ask`` pauses the turn until a person answers (``threads.services.actions``); it may say
how long they have (``expires_in``, seconds) and what an unanswered request resolves to
(``on_expiry``: ``deny``, the default, or ``allow``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

Decision = Literal["allow", "ask", "deny"]
DECISIONS: tuple[Decision, ...] = get_args(Decision)
# The order of precedence: a later decision overrides an earlier one.
_WEIGHT = {"allow": 0, "ask": 1, "deny": 2}
EXPIRIES = ("deny", "allow")
MAX_EXPIRES_IN_S = 30 * 86_400

_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
_OPERATORS = (*_COMPARISONS, "and", "or", "!", "in", "var")
MAX_DEPTH = 16


class ConditionInvalid(ValueError):
    """A condition the rule language does not accept; ``path`` locates it."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path


@dataclass(frozen=True)
class Rule:
    """One rule: its decision, the condition limiting it (None: every call) and where it was
    declared (``registry``, ``prompt`` or ``tenant``)."""

    decision: Decision
    when: Any = None
    source: str = ""
    id: str = ""  # a tenant rule's id
    expires_in: int | None = None  # ask: seconds a person has (None: ACTION_TTL_S)
    on_expiry: str = "deny"  # ask: what an unanswered request resolves to

    def applies(self, arguments: Mapping[str, Any]) -> bool:
        return self.when is None or truthy(evaluate(self.when, arguments))

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"decision": self.decision, "source": self.source}
        if self.when is not None:
            found["when"] = self.when
        if self.id:
            found["id"] = self.id
        if self.decision == "ask":
            found["on_expiry"] = self.on_expiry
            if self.expires_in is not None:
                found["expires_in"] = self.expires_in
        return found


@dataclass(frozen=True)
class Verdict:
    """What the rules decided for a call, and the rule that decided it (None: no rule
    applied, so the call is allowed)."""

    decision: Decision
    rule: Rule | None


def decide(rules: Iterable[Rule], arguments: Mapping[str, Any]) -> Verdict:
    """The most restrictive decision of the rules that apply to ``arguments``."""
    winner: Rule | None = None
    for rule in rules:
        if rule.applies(arguments) and (
            winner is None or _WEIGHT[rule.decision] > _WEIGHT[winner.decision]
        ):
            winner = rule
    return Verdict("allow" if winner is None else winner.decision, winner)


RULE_KEYS = ("decision", "when", "expires_in", "on_expiry")


def rule_from(value: Any, *, source: str) -> Rule:
    """A rule from its declared form: a decision (``"deny"``) or ``{"decision", "when"?,
    "expires_in"?, "on_expiry"?}`` (the last two for ``ask`` only). Raises ConditionInvalid
    (``path`` relative to the value)."""
    if isinstance(value, str):
        return Rule(decision_of(value), None, source)
    if not isinstance(value, Mapping):
        raise ConditionInvalid("must be a decision (allow, ask, deny) or {decision, when}")
    unknown = sorted(set(value) - set(RULE_KEYS))
    if unknown:
        raise ConditionInvalid(
            f"unknown key {unknown[0]!r} (known: {', '.join(RULE_KEYS)})", unknown[0]
        )
    decision = decision_of(value.get("decision"), "decision")
    when = value.get("when")
    if when is not None:
        for problem in condition_problems(when):
            raise ConditionInvalid(problem.message, _join("when", problem.path))
    expires_in, on_expiry = value.get("expires_in"), value.get("on_expiry")
    if decision != "ask" and (expires_in is not None or on_expiry is not None):
        key = "expires_in" if expires_in is not None else "on_expiry"
        raise ConditionInvalid(f"{key} applies to ask rules only", key)
    if expires_in is not None and (
        not isinstance(expires_in, int) or isinstance(expires_in, bool)
        or not 1 <= expires_in <= MAX_EXPIRES_IN_S
    ):  # fmt: skip
        raise ConditionInvalid(
            f"expires_in must be a whole number of seconds from 1 to {MAX_EXPIRES_IN_S}",
            "expires_in",
        )
    if on_expiry is not None and on_expiry not in EXPIRIES:
        raise ConditionInvalid(f"on_expiry must be one of {', '.join(EXPIRIES)}", "on_expiry")
    return Rule(decision, when, source, expires_in=expires_in, on_expiry=on_expiry or "deny")


def decision_of(value: Any, path: str = "") -> Decision:
    """``value`` as a decision; ConditionInvalid (at ``path``) when it is none."""
    if value not in DECISIONS:
        raise ConditionInvalid(f"{value!r} is not a decision (allow, ask, deny)", path)
    return value  # type: ignore[no-any-return]


# Conditions --------------------------------------------------------------------------------


def condition_problems(
    condition: Any, path: str = "", depth: int = 0
) -> Iterator[ConditionInvalid]:
    """Every problem of ``condition`` (paths relative to it), none when it is valid."""
    if depth > MAX_DEPTH:
        yield ConditionInvalid(f"nests deeper than {MAX_DEPTH} levels", path)
        return
    if _literal(condition):
        return
    if isinstance(condition, list):
        for index, item in enumerate(condition):
            yield from condition_problems(item, f"{path}[{index}]", depth + 1)
        return
    if not isinstance(condition, Mapping) or len(condition) != 1:
        yield ConditionInvalid(
            f"must be a literal, a list, or an object with one operator ({', '.join(_OPERATORS)})",
            path,
        )
        return
    ((operator, operand),) = condition.items()
    at = _join(path, str(operator))
    if operator not in _OPERATORS:
        yield ConditionInvalid(
            f"unknown operator {operator!r} (known: {', '.join(_OPERATORS)})", at
        )
    elif operator == "var":
        if not isinstance(operand, str):
            yield ConditionInvalid("var takes a dotted argument path (a string)", at)
    elif operator == "!":
        yield from condition_problems(operand, at, depth + 1)
    elif not isinstance(operand, list):
        yield ConditionInvalid(f"{operator} takes a list of operands", at)
    elif (operator in _COMPARISONS or operator == "in") and len(operand) != 2:
        yield ConditionInvalid(f"{operator} takes exactly two operands", at)
    elif operator in ("and", "or") and not operand:
        yield ConditionInvalid(f"{operator} takes at least one operand", at)
    else:
        yield from condition_problems(operand, at, depth + 1)


def evaluate(condition: Any, arguments: Mapping[str, Any]) -> Any:
    """The value of a valid ``condition`` for a call's ``arguments``."""
    if _literal(condition):
        return condition
    if isinstance(condition, list):
        return [evaluate(item, arguments) for item in condition]
    ((operator, operand),) = condition.items()
    if operator == "var":
        return _lookup(arguments, operand)
    if operator == "!":
        return not truthy(evaluate(operand, arguments))
    if operator == "and":
        return all(truthy(evaluate(item, arguments)) for item in operand)
    if operator == "or":
        return any(truthy(evaluate(item, arguments)) for item in operand)
    left, right = (evaluate(item, arguments) for item in operand)
    if operator == "in":
        return _contains(right, left)
    return _compare(operator, left, right)


def truthy(value: Any) -> bool:
    """JSON-logic truth: null, false, 0, "" and [] are false."""
    return bool(value)


def _literal(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def _lookup(arguments: Mapping[str, Any], path: str) -> Any:
    found: Any = arguments
    for part in path.split(".") if path else ():
        if isinstance(found, Mapping):
            found = found.get(part)
        elif isinstance(found, list) and part.isdigit() and int(part) < len(found):
            found = found[int(part)]
        else:
            return None
    return found


def _contains(container: Any, item: Any) -> bool:
    if isinstance(container, str):
        return isinstance(item, str) and item in container
    return isinstance(container, Sequence) and item in container


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare(operator: str, left: Any, right: Any) -> bool:
    if operator == "==":
        if _number(left) and _number(right):
            return bool(left == right)
        return type(left) is type(right) and bool(left == right)
    if operator == "!=":
        return not _compare("==", left, right)
    comparable = (_number(left) and _number(right)) or (
        isinstance(left, str) and isinstance(right, str)
    )
    if not comparable:
        return False
    if operator == "<":
        return bool(left < right)
    if operator == "<=":
        return bool(left <= right)
    if operator == ">":
        return bool(left > right)
    return bool(left >= right)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path and key else path or key
