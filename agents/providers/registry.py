"""Which adapter answers a :class:`~agents.providers.base.ModelSpec`."""

from __future__ import annotations

from agents.providers.base import ModelSpec, Provider
from agents.providers.scripted import ScriptedProvider


def provider_for(spec: ModelSpec) -> Provider:
    """The provider for ``spec.kind``.

    Raises :class:`~agents.providers.base.ProviderError` (non-retryable) for a scripted spec
    whose stored rules are invalid. Creating a provider is cheap; SDK clients are cached.
    An SDK is imported when its first model is called (a second or so of a process's start
    that a process calling no such model never pays).
    """
    if spec.kind == "openai":
        from agents.providers.openai_provider import OpenAIProvider

        return OpenAIProvider(spec)
    if spec.kind == "anthropic":
        from agents.providers.anthropic_provider import AnthropicProvider

        return AnthropicProvider(spec)
    return ScriptedProvider.from_spec(spec)
