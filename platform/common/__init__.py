"""Shared building blocks: ids, time, domain errors, envelope encryption, API plumbing."""
