"""The core rules of the admission queue: priority classes, fair order, quotas, preemption.

Pure: these modules decide from the values they are given and keep no state; the service's
queue, calendar and admission loop that will use them are not here (docs/scheduling.md).
"""
