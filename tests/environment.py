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

from config import dbroles

LOOPBACK_NETWORKS: Final = "127.0.0.0/8,::1/128"

os.environ["EGRESS_ALLOWED_NETWORKS"] = LOOPBACK_NETWORKS  # noqa: TID251 - the run's own environment
# A statement on a tenant-owned table outside any tenant or system context fails the test
# that ran it (common.tenant_wall), in this process and in the workers it starts.
os.environ["TENANT_WALL_STRICT"] = "true"  # noqa: TID251 - the run's own environment
# Run directly (not through `make test`), one owner's URL becomes the two roles' URLs.
if os.environ.get("DATABASE_URL") and not os.environ.get("DATABASE_MIGRATE_URL"):  # noqa: TID251
    _application, _owner = dbroles.split(os.environ["DATABASE_URL"])  # noqa: TID251
    if _owner is not None:
        os.environ["DATABASE_URL"], os.environ["DATABASE_MIGRATE_URL"] = _application, _owner  # noqa: TID251
