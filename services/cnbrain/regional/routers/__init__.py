"""Thin routers: each turns HTTP into a call of the placement service or a repository."""
