"""Definitions: models, prompts, agents, code tools; the Python registry; bundles; LLM providers."""
