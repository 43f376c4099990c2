"""Joint choice of options with OR-Tools CP-SAT.

Variables: one boolean per option. Constraints: at most one option per request; on every
site, the chosen options' CPU, memory, storage and accelerators fit its working capacity;
on every link, the chosen options' bandwidth fits its residual. Objective, lexicographic:
first serve as many requests as possible, weighted by 1 + priority; then minimise the sum
of the chosen options' objective values.

Before the model is built, an exact reduction drops dominated options. A resource is
contended when all options touching it could together exceed it. An option that touches no
contended resource can be taken whatever else is chosen, so every option of the same
request with a higher objective is dominated by it and removed. Only contended capacity is
expressed as constraints.
"""

from collections import defaultdict
from dataclasses import dataclass

from ortools.sat.python import cp_model

from cnbrain.placement.cycle import CycleState, Option

OBJECTIVE_SCALE = 10_000
"""Objective values are rounded to 1/OBJECTIVE_SCALE for the integer solver."""

SiteKey = tuple[int, int]
"""(site, dimension): dimensions 0-2 are CPU, memory, storage; 3 + c is accelerator column c."""


@dataclass(frozen=True, slots=True)
class SolverSettings:
    """Fixed limits of one solve: a time limit, the worker count and the seed.

    The limit is CP-SAT's deterministic time, so a solve that hits it gives the same answer
    on a busy machine as on an idle one; `wall_limit_s` is only a safety net.
    """

    time_limit_s: float = 0.05
    workers: int = 1
    seed: int = 0
    wall_limit_s: float = 2.0


@dataclass(frozen=True, slots=True)
class Assignment:
    chosen: dict[int, Option]
    status: str
    optimal: bool


def greedy_assignment(state: CycleState, options: dict[int, list[Option]]) -> dict[int, Option]:
    """Requests by priority then order, each takes its best option that still fits."""
    chosen: dict[int, Option] = {}
    used_site: dict[SiteKey, int] = defaultdict(int)
    used_link: dict[int, int] = defaultdict(int)
    b = state.batch
    for row in sorted(options, key=lambda r: (-int(b.priority[r]), r)):
        demand = _demand(state, row)
        for option in sorted(options[row], key=lambda o: o.objective):
            if all(
                used_site[(option.site, dim)] + want <= _free(state, option.site, dim)
                for dim, want in demand
            ) and all(
                used_link[link] + b.need_mbps[row] <= state.residual_mbps[link]
                for link in option.route.links
            ):
                for dim, want in demand:
                    used_site[(option.site, dim)] += want
                for link in option.route.links:
                    used_link[link] += int(b.need_mbps[row])
                chosen[row] = option
                break
    return chosen


def solve_assignment(
    state: CycleState, options: dict[int, list[Option]], settings: SolverSettings
) -> Assignment:
    """Choose at most one option per request so that capacities hold; see the module doc."""
    contended_sites, contended_links = _contended(state, options)
    reduced = {
        row: _undominated(state, opts, contended_sites, contended_links)
        for row, opts in options.items()
        if opts
    }
    if not reduced:
        return Assignment(chosen={}, status="NO_OPTIONS", optimal=True)
    b = state.batch
    model = cp_model.CpModel()
    x: dict[int, list[tuple[cp_model.IntVar, Option]]] = {}
    site_terms: dict[SiteKey, list[tuple[cp_model.IntVar, int]]] = defaultdict(list)
    link_terms: dict[int, list[tuple[cp_model.IntVar, int]]] = defaultdict(list)
    for row, opts in reduced.items():
        x[row] = [(model.new_bool_var(f"x{row}_{i}"), o) for i, o in enumerate(opts)]
        model.add_at_most_one(v for v, _ in x[row])
        demand, need = _demand(state, row), int(b.need_mbps[row])
        for v, o in x[row]:
            for dim, want in demand:
                if (o.site, dim) in contended_sites:
                    site_terms[(o.site, dim)].append((v, want))
            for link in o.route.links:
                if link in contended_links:
                    link_terms[link].append((v, need))
    for key, entries in site_terms.items():
        model.add(_weighted(entries) <= _free(state, *key))
    for link, entries in link_terms.items():
        model.add(_weighted(entries) <= int(state.residual_mbps[link]))
    coef = {row: [round(o.objective * OBJECTIVE_SCALE) for _, o in x[row]] for row in x}
    reward_base = sum(max(max(c), 0) for c in coef.values()) + 1
    objective: list[tuple[cp_model.IntVar, int]] = []
    for row in x:
        reward = reward_base * (1 + int(b.priority[row]))
        objective.extend((v, c - reward) for (v, _), c in zip(x[row], coef[row], strict=True))
    model.minimize(_weighted(objective))
    hint = greedy_assignment(state, reduced)
    for row in x:
        for v, o in x[row]:
            model.add_hint(v, hint.get(row) is o)
    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = settings.time_limit_s
    solver.parameters.max_time_in_seconds = settings.wall_limit_s
    solver.parameters.num_workers = settings.workers
    solver.parameters.random_seed = settings.seed
    status = solver.solve(model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        chosen = {row: o for row in x for v, o in x[row] if solver.boolean_value(v)}
        return Assignment(
            chosen=chosen, status=solver.status_name(status), optimal=status == cp_model.OPTIMAL
        )
    return Assignment(
        chosen=hint, status=f"{solver.status_name(status)}_GREEDY_FALLBACK", optimal=False
    )


def _weighted(entries: list[tuple[cp_model.IntVar, int]]) -> cp_model.LinearExpr:
    return cp_model.LinearExpr.weighted_sum([v for v, _ in entries], [w for _, w in entries])


def _contended(
    state: CycleState, options: dict[int, list[Option]]
) -> tuple[set[SiteKey], set[int]]:
    """Site dimensions and links that the options, one per request at most, could overfill."""
    site_worst: dict[SiteKey, int] = defaultdict(int)
    link_worst: dict[int, int] = defaultdict(int)
    for row, opts in options.items():
        if not opts:
            continue
        demand = _demand(state, row)
        for site in {o.site for o in opts}:
            for dim, want in demand:
                site_worst[(site, dim)] += want
        need = int(state.batch.need_mbps[row])
        if need > 0:
            for link in set().union(*(o.route.links for o in opts)):
                link_worst[link] += need
    return (
        {key for key, worst in site_worst.items() if worst > _free(state, *key)},
        {link for link, worst in link_worst.items() if worst > int(state.residual_mbps[link])},
    )


def _undominated(
    state: CycleState, opts: list[Option], contended_sites: set[SiteKey], contended_links: set[int]
) -> list[Option]:
    """`opts` of one request, best first, up to its best option that touches nothing contended."""
    demand = _demand(state, opts[0].row)
    kept: list[Option] = []
    for o in sorted(opts, key=lambda o: o.objective):
        kept.append(o)
        if all(
            (o.site, dim) not in contended_sites for dim, _ in demand
        ) and contended_links.isdisjoint(o.route.links):
            break
    return kept


def _demand(state: CycleState, row: int) -> list[tuple[int, int]]:
    """(dimension, amount) pairs request `row` takes on a site, amounts above zero."""
    b = state.batch
    dims = [(0, int(b.cpu_m[row])), (1, int(b.mem_mib[row])), (2, int(b.storage_gib[row]))]
    if b.acc_milli[row] > 0:
        dims.append((3 + int(b.acc_column[row]), int(b.acc_milli[row])))
    return [(d, w) for d, w in dims if w > 0]


def _free(state: CycleState, site: int, dim: int) -> int:
    if dim == 0:
        return int(state.free_cpu_m[site])
    if dim == 1:
        return int(state.free_mem_mib[site])
    if dim == 2:
        return int(state.free_storage_gib[site])
    return int(state.free_acc[site, dim - 3])
