"""A typed client for the Standard Agents Platform API, sync and async.

::

    from standard_agents_client import Client

    client = Client()  # AGENTS_API_URL and AGENTS_API_KEY, or Client(base_url, api_key)
    thread = client.threads.create("assistant")
    answer = client.turns.submit_and_wait(thread["id"], "What time is it?", timeout=60)
    print(answer["messages"][-1]["content"])

:class:`AsyncClient` has the same resources and arguments, awaited. Answers are typed
dictionaries (:mod:`standard_agents_client.types`); lists answer a :class:`Page`, and each
has an ``iter`` that walks every page; errors are :class:`ApiError` subclasses
(:mod:`standard_agents_client.errors`).
"""

from standard_agents_client._async import AsyncClient
from standard_agents_client._config import ConfigurationError
from standard_agents_client._operations.threads import EnvValue, attachment
from standard_agents_client._streams import ServerSentEvent
from standard_agents_client._sync import Client
from standard_agents_client._version import __version__
from standard_agents_client.errors import (
    AgentsError,
    ApiConnectionError,
    ApiError,
    ApiTimeout,
    AuthenticationError,
    Conflict,
    Gone,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RangeNotSatisfiable,
    RateLimited,
    ServerError,
    ServiceUnavailable,
    StreamRevoked,
    UnexpectedAnswer,
    UnsupportedMediaType,
    ValidationError,
)
from standard_agents_client.pagination import Page
from standard_agents_client.times import datetime_from_us, us_from_datetime

__all__ = [
    "AgentsError",
    "ApiConnectionError",
    "ApiError",
    "ApiTimeout",
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "ConfigurationError",
    "Conflict",
    "EnvValue",
    "Gone",
    "MethodNotAllowed",
    "NotFound",
    "Page",
    "PayloadTooLarge",
    "PermissionDenied",
    "RangeNotSatisfiable",
    "RateLimited",
    "ServerError",
    "ServerSentEvent",
    "ServiceUnavailable",
    "StreamRevoked",
    "UnexpectedAnswer",
    "UnsupportedMediaType",
    "ValidationError",
    "__version__",
    "attachment",
    "datetime_from_us",
    "us_from_datetime",
]
