"""Which adapter answers a :class:`~agents.providers.base.ModelSpec`."""

from __future__ import annotations

from agents.providers.anthropic_provider import AnthropicProvider
from agents.providers.base import ModelSpec, Provider
from agents.providers.openai_provider import OpenAIProvider
from agents.providers.scripted import ScriptedProvider


def provider_for(spec: ModelSpec) -> Provider:
    """The provider for ``spec.kind``.

    Raises :class:`~agents.providers.base.ProviderError` (non-retryable) for a scripted spec
    whose stored rules are invalid. Creating a provider is cheap; SDK clients are cached.
    """
    if spec.kind == "openai":
        return OpenAIProvider(spec)
    if spec.kind == "anthropic":
        return AnthropicProvider(spec)
    return ScriptedProvider.from_spec(spec)
