"""Stored, stateless scripts: the ``config`` of a ``Model`` row of kind ``scripted``.

A worker process answers from the configuration alone, so the answer depends only on the
request::

    {
      "rules": [
        {"when": {"last_role": "tool", "last_tool": "search"},
         "respond": {"text": "Found: {last_tool_result}"}},
        {"when": {"last_user_contains": "weather"},
         "respond": {"tool_calls": [{"name": "search",
                                     "arguments": {"q": "{last_user_message}"}}]}},
        {"respond": {"text": "You said: {last_user_message}"}}
      ],
      "streaming": {"chunk_size": 8, "chunk_delay_ms": 0}
    }

The first rule whose ``when`` holds answers. ``when`` keys (all optional, all must hold):
``last_role`` (role of the newest message), ``last_user_contains`` (case-insensitive substring
of the newest user message), ``last_tool`` (the newest message is a result of this tool),
``system_contains`` (case-insensitive substring of the system prompt). ``respond`` is one of
``{"text", "reasoning"?}``, ``{"tool_calls": [{"name", "arguments"?}], "text"?}`` or
``{"error", "status"?}`` (default 500; 408/409/429/5xx are retryable), each with an optional
``delay_ms``.

Placeholders are replaced in texts and in string argument values, in one plain substitution pass
(nothing else is interpreted): ``{last_user_message}``, ``{last_tool_result}`` and
``{last_user_number}``, the first number in the newest user message as written there. An
argument value that is exactly ``"{last_user_number}"`` becomes that number, typed (an integer,
or a float when written with a decimal point); with no number in the message, such an argument
is left out of its object (a list holds ``null``). Any other ``{last_…}`` is a configuration
problem, so a misspelt placeholder is refused rather than sent as it is.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agents.providers.base import LLMMessage, ProviderError, ProviderRequest

_TOP_KEYS: Final = ("rules", "streaming")
_RULE_KEYS: Final = ("when", "respond")
_WHEN_KEYS: Final = ("last_role", "last_user_contains", "last_tool", "system_contains")
_RESPOND_KEYS: Final = ("text", "reasoning", "tool_calls", "error", "status", "delay_ms")
_CALL_KEYS: Final = ("name", "arguments", "id")
_STREAMING_KEYS: Final = ("chunk_size", "chunk_delay_ms")
_ROLES: Final = ("system", "user", "assistant", "tool")
MAX_DELAY_MS: Final = 60_000
MAX_CHUNK_SIZE: Final = 1_000_000

PLACEHOLDERS: Final = ("last_user_message", "last_tool_result", "last_user_number")
NUMBER_PLACEHOLDER: Final = "{last_user_number}"
_PLACEHOLDER: Final = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
# What looks like one of ours: ``{last_`` and a name. Other braces are plain text.
_PLACEHOLDER_LIKE: Final = re.compile(r"\{last_[A-Za-z0-9_]*\}")
# A number as people write one: digits, an optional minus (not a hyphen inside a word) and an
# optional decimal part; "1,000" is 1 (no thousands separators).
_NUMBER: Final = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")

Problem = tuple[str, str]


@dataclass(frozen=True)
class When:
    last_role: str | None = None
    last_user_contains: str | None = None
    last_tool: str | None = None
    system_contains: str | None = None

    def matches(self, request: ProviderRequest) -> bool:
        messages = request.messages
        last = messages[-1] if messages else None
        if self.last_role is not None and (last is None or last.role != self.last_role):
            return False
        if self.last_tool is not None and (
            last is None or last.role != "tool" or last.name != self.last_tool
        ):
            return False
        if self.last_user_contains is not None and (
            self.last_user_contains.lower() not in last_text(messages, "user").lower()
        ):
            return False
        return self.system_contains is None or self.system_contains.lower() in (
            system_text(messages).lower()
        )


@dataclass(frozen=True)
class Respond:
    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    error: str | None = None
    status: int = 500
    delay_ms: int = 0


@dataclass(frozen=True)
class Rule:
    when: When
    respond: Respond


@dataclass(frozen=True)
class ScriptRules:
    """A parsed, valid stored script."""

    rules: tuple[Rule, ...]
    chunk_size: int | None = None
    chunk_delay_ms: int = 0

    @classmethod
    def parse(cls, config: object, *, model: str = "scripted") -> ScriptRules:
        """Raises a non-retryable :class:`ProviderError` listing every problem of ``config``."""
        problems = check_scripted_config(config)
        if problems:
            listed = "; ".join(f"{path or 'config'}: {message}" for path, message in problems)
            raise ProviderError(
                f"scripted model '{model}' has an invalid configuration: {listed}",
                retryable=False,
                provider="scripted",
                model=model,
                code="scripted_config_invalid",
            )
        assert isinstance(config, Mapping)
        streaming = config.get("streaming") or {}
        return cls(
            rules=tuple(_rule(raw) for raw in config["rules"]),
            chunk_size=streaming.get("chunk_size"),
            chunk_delay_ms=streaming.get("chunk_delay_ms", 0),
        )

    def first_match(self, request: ProviderRequest) -> Rule | None:
        return next((rule for rule in self.rules if rule.when.matches(request)), None)


def _rule(raw: Mapping[str, Any]) -> Rule:
    when = raw.get("when") or {}
    respond = raw["respond"]
    return Rule(
        when=When(**{key: when[key] for key in _WHEN_KEYS if key in when}),
        respond=Respond(
            text=respond.get("text", ""),
            reasoning=respond.get("reasoning", ""),
            tool_calls=tuple(respond.get("tool_calls", ())),
            error=respond.get("error"),
            status=respond.get("status", 500),
            delay_ms=respond.get("delay_ms", 0),
        ),
    )


# Placeholders ----------------------------------------------------------------------------------


def last_text(messages: Sequence[LLMMessage], role: str) -> str:
    """The text of the newest message of ``role`` ("" when there is none)."""
    for message in reversed(messages):
        if message.role == role:
            return message.text
    return ""


def system_text(messages: Sequence[LLMMessage]) -> str:
    return "\n\n".join(message.text for message in messages if message.role == "system")


def _first_number(text: str) -> str | None:
    found = _NUMBER.search(text)
    return found.group() if found else None


def _typed(written: str | None) -> int | float | None:
    if written is None:
        return None
    return float(written) if "." in written else int(written)


@dataclass(frozen=True)
class Placeholders:
    """What the placeholders stand for in one request: each as text, and the number typed."""

    texts: Mapping[str, str]
    number: int | float | None

    @classmethod
    def of(cls, request: ProviderRequest) -> Placeholders:
        user = last_text(request.messages, "user")
        number = _first_number(user)
        texts = {
            "last_user_message": user,
            "last_tool_result": last_text(request.messages, "tool"),
            "last_user_number": number or "",
        }
        return cls(texts=texts, number=_typed(number))

    def text(self, template: str) -> str:
        """``template`` with its placeholders replaced, in one pass: a placeholder inside the
        substituted text stays as it is."""
        return _PLACEHOLDER.sub(lambda match: self.texts[match.group(1)], template)

    def arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of a tool call's ``arguments`` with the placeholders replaced in every string
        it holds; a value that is exactly ``"{last_user_number}"`` becomes the number (left
        out of its object, ``None`` in a list, when the message has none)."""
        return {key: self._filled(item) for key, item in arguments.items() if self._kept(item)}

    def _filled(self, value: Any) -> Any:
        if value == NUMBER_PLACEHOLDER:
            return self.number
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return self.arguments(value)
        if isinstance(value, list):
            return [self._filled(item) for item in value]
        return copy.deepcopy(value)

    def _kept(self, value: Any) -> bool:
        return not (value == NUMBER_PLACEHOLDER and self.number is None)


# Validation ------------------------------------------------------------------------------------


def check_scripted_config(config: object) -> list[Problem]:
    """Every problem of a stored scripted configuration as ``(path, message)``.

    Paths are relative to the configuration (``rules[2].respond``); ``""`` is the whole of it.
    An empty list means the configuration is valid.
    """
    if not isinstance(config, Mapping):
        return [("", "must be an object with a 'rules' list")]
    problems = _unknown_keys(config, _TOP_KEYS, "")
    rules = config.get("rules")
    if not isinstance(rules, list) or not rules:
        problems.append(("rules", "required: a non-empty list of {when, respond} rules"))
    else:
        for index, rule in enumerate(rules):
            problems.extend(_check_rule(rule, f"rules[{index}]"))
    if "streaming" in config:
        problems.extend(_check_streaming(config["streaming"]))
    return problems


def _check_rule(rule: object, path: str) -> list[Problem]:
    if not isinstance(rule, Mapping):
        return [(path, "must be an object with 'respond' and optionally 'when'")]
    problems = _unknown_keys(rule, _RULE_KEYS, path)
    if "when" in rule:
        problems.extend(_check_when(rule["when"], f"{path}.when"))
    if "respond" not in rule:
        problems.append((f"{path}.respond", "required"))
    else:
        problems.extend(_check_respond(rule["respond"], f"{path}.respond"))
    return problems


def _check_when(when: object, path: str) -> list[Problem]:
    if not isinstance(when, Mapping):
        return [(path, "must be an object")]
    problems = _unknown_keys(when, _WHEN_KEYS, path)
    for key in _WHEN_KEYS:
        if key in when and not _text(when[key]):
            problems.append((f"{path}.{key}", "must be a non-empty string"))
    role = when.get("last_role")
    if _text(role) and role not in _ROLES:
        problems.append((f"{path}.last_role", f"must be one of {', '.join(_ROLES)}"))
    return problems


def _check_respond(respond: object, path: str) -> list[Problem]:
    if not isinstance(respond, Mapping):
        return [(path, "must be an object")]
    problems = _unknown_keys(respond, _RESPOND_KEYS, path)
    has_error = "error" in respond
    if has_error and ({"text", "tool_calls", "reasoning"} & respond.keys()):
        problems.append((path, "'error' cannot be combined with text, reasoning or tool_calls"))
    if not has_error and not ({"text", "tool_calls"} & respond.keys()):
        problems.append((path, "needs one of 'text', 'tool_calls' or 'error'"))
    for key in ("text", "reasoning"):
        if key in respond and not isinstance(respond[key], str):
            problems.append((f"{path}.{key}", "must be a string"))
    for key in ("text", "reasoning", "error"):
        problems.extend(_check_placeholders(respond.get(key), f"{path}.{key}"))
    if has_error and not _text(respond["error"]):
        problems.append((f"{path}.error", "must be a non-empty string"))
    if "status" in respond:
        status = respond["status"]
        if not has_error:
            problems.append((f"{path}.status", "only applies to an 'error' response"))
        elif not _int_in(status, 400, 599):
            problems.append((f"{path}.status", "must be an HTTP error status (400-599)"))
    if "delay_ms" in respond and not _int_in(respond["delay_ms"], 0, MAX_DELAY_MS):
        problems.append((f"{path}.delay_ms", f"must be an integer from 0 to {MAX_DELAY_MS}"))
    if "tool_calls" in respond:
        problems.extend(_check_tool_calls(respond["tool_calls"], f"{path}.tool_calls"))
    return problems


def _check_tool_calls(calls: object, path: str) -> list[Problem]:
    if not isinstance(calls, list) or not calls:
        return [(path, "must be a non-empty list of {name, arguments}")]
    problems: list[Problem] = []
    for index, call in enumerate(calls):
        where = f"{path}[{index}]"
        if not isinstance(call, Mapping):
            problems.append((where, "must be an object with 'name' and 'arguments'"))
            continue
        problems.extend(_unknown_keys(call, _CALL_KEYS, where))
        if not _text(call.get("name")):
            problems.append((f"{where}.name", "required: the tool's name"))
        if "arguments" in call and not isinstance(call["arguments"], Mapping):
            problems.append((f"{where}.arguments", "must be an object"))
        elif "arguments" in call:
            problems.extend(_check_placeholders(call["arguments"], f"{where}.arguments"))
        if "id" in call and not _text(call["id"]):
            problems.append((f"{where}.id", "must be a non-empty string"))
    return problems


def _check_placeholders(value: object, path: str) -> list[Problem]:
    """Every ``{last_…}`` in the strings ``value`` holds must be a known placeholder."""
    if isinstance(value, str):
        unknown = [found for found in _PLACEHOLDER_LIKE.findall(value)
                   if found[1:-1] not in PLACEHOLDERS]  # fmt: skip
        if not unknown:
            return []
        known = ", ".join(f"{{{name}}}" for name in PLACEHOLDERS)
        return [(path, f"unknown placeholder {', '.join(unknown)}; known: {known}")]
    if isinstance(value, Mapping):
        return [
            problem
            for key, item in value.items()
            for problem in _check_placeholders(item, f"{path}.{key}")
        ]
    if isinstance(value, list):
        return [
            problem
            for index, item in enumerate(value)
            for problem in _check_placeholders(item, f"{path}[{index}]")
        ]
    return []


def _check_streaming(streaming: object) -> list[Problem]:
    if not isinstance(streaming, Mapping):
        return [("streaming", "must be an object with chunk_size and chunk_delay_ms")]
    problems = _unknown_keys(streaming, _STREAMING_KEYS, "streaming")
    if "chunk_size" in streaming and not _int_in(streaming["chunk_size"], 1, MAX_CHUNK_SIZE):
        problems.append(("streaming.chunk_size", f"must be an integer from 1 to {MAX_CHUNK_SIZE}"))
    if "chunk_delay_ms" in streaming and not _int_in(streaming["chunk_delay_ms"], 0, MAX_DELAY_MS):
        problems.append(
            ("streaming.chunk_delay_ms", f"must be an integer from 0 to {MAX_DELAY_MS}")
        )
    return problems


def _unknown_keys(mapping: Mapping[Any, Any], known: tuple[str, ...], path: str) -> list[Problem]:
    prefix = f"{path}." if path else ""
    return [
        (f"{prefix}{key}", f"unknown key; expected one of {', '.join(known)}")
        for key in mapping
        if key not in known
    ]


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _int_in(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
