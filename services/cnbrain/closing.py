"""`Closing`: the async context manager of an object released by its `aclose()`."""

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self


class Closing(ABC):
    """`async with thing:` gives `thing` and calls `thing.aclose()` on leaving, however the
    body ends. Subclasses define `aclose()`; one that must do more on entry overrides
    `__aenter__`."""

    __slots__ = ()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @abstractmethod
    async def aclose(self) -> None:
        """Release what the object holds."""
