"""The scenario suite's worker processes are not forked from the process that runs it
(whose threads, such as a progress display's, may hold locks at a fork): a fork server
starts them."""

import os

from cnbrain.simulate.scenario_report import worker_pool


def test_the_workers_are_not_children_of_this_process() -> None:
    with worker_pool(1) as pool:
        parent = pool.submit(os.getppid).result(timeout=120)
    assert parent != os.getpid()
