"""LLM providers: neutral request/response types, OpenAI, Anthropic and scripted adapters."""
