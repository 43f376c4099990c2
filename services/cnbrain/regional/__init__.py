"""The regional brain: a REST service over the placement engine, with durable state."""
