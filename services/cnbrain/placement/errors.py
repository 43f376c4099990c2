"""Errors of the placement engine."""

from cnbrain.domain.errors import Internal, Invalid


class RequestError(Invalid):
    """A request is wrong. `field` is the dotted path of the offending field."""

    field: str

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, field=field)


class PlacementError(Internal, RuntimeError):
    """A step of the placement cycle failed unexpectedly; `step` names it."""

    def __init__(self, step: str, cause: BaseException) -> None:
        super().__init__(f"placement step {step!r} failed: {cause}")
        self.step = step
