"""Retention: per-tenant policies, the beat task that prunes old history in bounded batches,
and the storage report of a thread."""
