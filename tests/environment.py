"""The environment every test run starts from, set before Django reads its settings (this
module is a pytest plugin loaded with ``-p``, ahead of pytest-django) and inherited by the
Celery workers and servers the tests start.

Tests point models at loopback fake LLM servers and webhooks at loopback receivers, so the
run allows loopback destinations through the egress guard explicitly, the way an operator
allows a local model server. The egress tests narrow it again to prove the refusals.
"""

from __future__ import annotations

import os
from typing import Final

LOOPBACK_NETWORKS: Final = "127.0.0.0/8,::1/128"

os.environ["EGRESS_ALLOWED_NETWORKS"] = LOOPBACK_NETWORKS  # noqa: TID251 - the run's own environment
