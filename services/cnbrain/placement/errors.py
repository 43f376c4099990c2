"""Errors of the placement engine."""


class RequestError(ValueError):
    """A request is wrong. `field` is the dotted path of the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class PlacementError(RuntimeError):
    """A step of the placement cycle failed unexpectedly; `step` names it."""

    def __init__(self, step: str, cause: BaseException) -> None:
        super().__init__(f"placement step {step!r} failed: {cause}")
        self.step = step
