"""The audit trail: an append-only, tenant-scoped log of who did which security-relevant
action."""
