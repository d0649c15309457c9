"""Where the API is and the key to call it with: given to the client, else read from the
environment (``AGENTS_API_URL``, ``AGENTS_API_KEY``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from standard_agents_client._call import API_PREFIX, Call
from standard_agents_client._version import __version__
from standard_agents_client.errors import AgentsError

URL_VARIABLE = "AGENTS_API_URL"
KEY_VARIABLE = "AGENTS_API_KEY"
DEFAULT_TIMEOUT_S = 30.0
USER_AGENT = f"standard-agents-client/{__version__}"


class ConfigurationError(AgentsError):
    """The client was not told where the API is, or with which key to call it."""


@dataclass(frozen=True)
class Settings:
    base_url: str
    api_key: str
    timeout: float
    headers: Mapping[str, str]


def settings(
    base_url: str | None,
    api_key: str | None,
    timeout: float,
    headers: Mapping[str, str] | None,
) -> Settings:
    """The client's settings: the arguments given, else the environment's variables. The
    URL is the server's (``http://127.0.0.1:8000``); a trailing ``/api/v1`` is dropped."""
    environ = os.environ  # noqa: TID251 (a library reads its own settings)
    url = base_url or environ.get(URL_VARIABLE)
    key = api_key or environ.get(KEY_VARIABLE)
    if not url:
        raise ConfigurationError(f"give base_url or set {URL_VARIABLE} (http://host:port)")
    if not key:
        raise ConfigurationError(f"give api_key or set {KEY_VARIABLE} (sap_…)")
    url = url.rstrip("/").removesuffix(API_PREFIX).rstrip("/")
    sent = {"Authorization": f"Bearer {key}", "User-Agent": USER_AGENT, **(headers or {})}
    return Settings(base_url=url, api_key=key, timeout=timeout, headers=sent)


def request_options(call: Call[Any], config: Settings) -> dict[str, Any]:
    """What both clients pass to httpx's ``build_request`` for ``call`` (its body aside:
    each client reads an upload its own way)."""
    absolute = call.path.startswith(("http://", "https://"))  # a page's next, say
    url = call.path if absolute else config.base_url + API_PREFIX + call.path
    timeout: float | httpx.Timeout = config.timeout
    if call.timeout is not None and call.timeout > config.timeout:
        timeout = httpx.Timeout(config.timeout, read=call.timeout)
    headers = {**config.headers, **call.headers}
    size = call.content.size() if call.content is not None else None
    if size is not None:
        headers["Content-Length"] = str(size)
    return {
        "method": call.method,
        "url": url,
        "params": dict(call.params) or None,
        "json": call.json,
        "data": dict(call.data) if call.data is not None else None,
        "headers": headers,
        "timeout": timeout,
    }
