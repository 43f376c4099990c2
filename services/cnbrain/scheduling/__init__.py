"""The core rules of the admission queue: priority classes, fair order, quotas over time,
conservative backfill, preemption, why a request waits, and the one admission round that
puts them together (`admission.admission_round`).

Pure: these modules decide from the values they are given and keep no state; the regional
brain's queue and admission loop that use them are in `cnbrain.regional` (docs/scheduling.md).
"""
