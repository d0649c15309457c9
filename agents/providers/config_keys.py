"""The ``config`` keys each SDK adapter reads, and the checks a model's ``config`` passes when
the model is saved. Apart from the adapters so that saving a model (every web process) does
not import the providers' SDKs: they load where a model is called."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from agents.providers._sdk import SDK_CONFIG_KEYS, ConfigCheck, ConfigProblem, check_sdk_config

MAX_TOKENS_PARAMS: Final = ("max_completion_tokens", "max_tokens")


def _max_tokens_param(value: object) -> str | None:
    return None if value in MAX_TOKENS_PARAMS else f"must be one of {', '.join(MAX_TOKENS_PARAMS)}"


OPENAI_CONFIG_KEYS: Final[Mapping[str, ConfigCheck]] = {
    **SDK_CONFIG_KEYS,
    "max_tokens_param": _max_tokens_param,  # OpenAIProvider._params
}
# Only the keys both SDK adapters read: the Anthropic adapter reads none of its own.
ANTHROPIC_CONFIG_KEYS: Final[Mapping[str, ConfigCheck]] = SDK_CONFIG_KEYS


def check_openai_config(config: object) -> list[ConfigProblem]:
    """Every problem of an ``openai`` model's ``config`` (see ``check_sdk_config``)."""
    return check_sdk_config(config, provider="openai", keys=OPENAI_CONFIG_KEYS)


def check_anthropic_config(config: object) -> list[ConfigProblem]:
    """Every problem of an ``anthropic`` model's ``config`` (see ``check_sdk_config``)."""
    return check_sdk_config(config, provider="anthropic", keys=ANTHROPIC_CONFIG_KEYS)
