"""A per-cycle cache: values derived once from a cycle's batch and snapshot, shared by the
plugins that need them. Each cycle starts with an empty cache, so no value outlives the
snapshot it was derived from."""

from collections.abc import Callable
from typing import Generic, TypeVar, cast

T = TypeVar("T")


class CacheKey(Generic[T]):
    """Names one cached value and fixes its type; compared by identity."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"CacheKey({self.name!r})"


class CycleCache:
    """Values by key, each computed on first use."""

    def __init__(self) -> None:
        self._values: dict[CacheKey[object], object] = {}

    def get(self, key: CacheKey[T], compute: Callable[[], T]) -> T:
        """The value under `key`, computed by `compute` the first time it is asked for."""
        slot = cast(CacheKey[object], key)
        if slot not in self._values:
            self._values[slot] = compute()
        return cast(T, self._values[slot])
