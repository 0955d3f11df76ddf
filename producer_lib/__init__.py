"""Emit outbox events inside the caller's database transaction."""
