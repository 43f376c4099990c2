"""Durable state of a brain: SQLAlchemy models, sessions, and repository functions."""
