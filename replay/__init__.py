"""Replay and evidence: the portable export of a thread or session, and its validator."""
