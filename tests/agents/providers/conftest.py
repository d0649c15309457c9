from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.llm_servers import (
    FakeAnthropicServer,
    FakeOpenAIServer,
    serve_anthropic,
    serve_openai,
)


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    yield from serve_openai()


@pytest.fixture
def anthropic_server() -> Iterator[FakeAnthropicServer]:
    yield from serve_anthropic()
