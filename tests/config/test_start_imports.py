"""What a process imports at start: the model providers' and MCP's SDKs (two seconds of every
process's start together) load only where they are used, not when Django sets up, the URLs
load, a definition is validated or the engine's modules load. (A2A's, 0.4 s, loads with its
routes' views.)"""

from __future__ import annotations

import json
import subprocess
import sys

from config import env

HEAVY = ("anthropic", "openai", "mcp", "mcp_types")

PROBE = f"""
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django
django.setup()
from django.urls import get_resolver
get_resolver().url_patterns
from agents.documents import ModelDoc
from agents.services import parse_document
parse_document("models", {{"name": "m", "provider": "anthropic", "model_id": "claude",
                           "config": {{"timeout_s": 30}}}})
import connectors.tools, connectors.a2a, connectors.servers, threads.runtime.engine.model_call
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}} & set({list(HEAVY)!r}))))
"""


def test_setting_up_loading_urls_and_checking_a_model_import_no_provider_or_protocol_sdk() -> None:
    answer = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=env.REPO_DIR, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip

    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout.strip().splitlines()[-1]) == []
