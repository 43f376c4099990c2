"""The national brain with a pause between prepare and commit, for end-to-end tests that
need a moment in which parts are prepared and not yet committed (to kill a brain then, or to
let submissions gather into the next batch).

`python -m tests.slow_commits brain national ...` runs the brain's own command line, with every
commit of prepared parts waiting SLOW_COMMITS_MS milliseconds (an environment variable)
first. The brain's production code has no such pause; only this module, on the test's
PYTHONPATH, adds it (see `federation_processes.LocalFederation`)."""

import asyncio
import os
from collections.abc import Mapping, Sequence

from cnbrain.cli.main import main
from cnbrain.national.coordinator import Commitment, Coordinator
from cnbrain.national.planner import AttemptError, Plan

DELAY_VARIABLE = "SLOW_COMMITS_MS"


def slow_down_commits(delay_s: float) -> None:
    """Make every `Coordinator` wait `delay_s` before committing the parts it prepared."""
    commit = Coordinator.commit

    async def commit_later(
        self: Coordinator, plans: Sequence[Plan], commitments: Mapping[int, Commitment]
    ) -> dict[int, AttemptError]:
        if plans:
            await asyncio.sleep(delay_s)
        return await commit(self, plans, commitments)

    Coordinator.commit = commit_later  # type: ignore[method-assign]


if __name__ == "__main__":
    slow_down_commits(int(os.environ[DELAY_VARIABLE]) / 1000)
    raise SystemExit(main())
