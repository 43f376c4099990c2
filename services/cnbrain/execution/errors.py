"""The errors every cluster backend raises, whatever scheduler is behind it."""

from cnbrain.domain.errors import CnbrainError, Conflict, NotFound, Unavailable


class BackendError(CnbrainError):
    """Base of the errors of `cnbrain.execution`; `str(error)` says what happened and where."""


class BackendUnavailable(BackendError, Unavailable):  # noqa: N818 - the name the callers use
    """The scheduler cannot be used now: unreachable, timed out, or its credentials refused.

    Retrying later may succeed; nothing was changed on the scheduler by the failed call, except
    that a submit which timed out after sending may have created a job the caller never learnt.
    """


class BackendRejected(BackendError, Conflict):  # noqa: N818 - the name the callers use
    """The scheduler answered and refused: a job it cannot run, or an operation on a job it
    does not allow in the job's state. `message` is the scheduler's own reason."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnknownJob(BackendError, NotFound):  # noqa: N818 - the name the callers use
    """The scheduler has no job with this id, neither running nor in its accounting."""

    def __init__(self, job_id: str, detail: str = "") -> None:
        super().__init__(f"no job {job_id!r}" + (f": {detail}" if detail else ""))
        self.job_id = job_id
