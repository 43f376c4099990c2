"""Fragmentation of a site's free accelerators against the shapes its reservations hold, which
decides where on the site a gang goes (`cnbrain.ledger.nodes`).

In the style of fragmentation gradient descent (FGD: Weng et al., "Beware of Fragmentation",
USENIX ATC '23), with the copies of our FGD (`cnbrain.placement.fragmentation`), on the
compact summary a brain keeps instead of nodes:

- **The mix.** What the next gangs on a site will ask of one accelerator model is taken to be
  what the brain's reservations hold there now: per shape asked of one node (`devices` whole
  accelerators, or `milli` of one), the number of node takes of that shape on the site's
  pools of the model. A site that holds nothing has an empty mix.
- **Fragmentation**, in thousandths of an accelerator, against one shape, summed over the mix
  by count:
  - `k` whole free accelerators of a node count, against `d` per node, all `k` when `k < d`,
    else the `k mod d` left after as many copies as they hold; against a fraction `m`, the
    `1000 mod m` each leaves after as many copies as it holds;
  - a shared accelerator with `f` free counts all of `f` against whole accelerators, and
    against a fraction `m` all of `f` when `f < m`, else `f mod m`;
  - against a shape that asks for no accelerator, all of it counts.
- **The choice.** A gang goes where fragmentation grows least: the pool, the nodes (by their
  free accelerators) and, for a fraction, the shared or whole accelerator. Ties go to best
  fit: the pool and the nodes left with the fewest free, a shared accelerator before a
  whole one and the one with the least room; then to the first pool. With an empty mix
  every growth is 0, and so the choice is best fit.

Integers throughout: a growth is exact, and a tie is a tie.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import repeat
from typing import Final

from cnbrain.domain.accelerators import MILLI

MAX_SHAPES: Final = 32
"""The most shapes a mix keeps, those held most: a fraction's choice weighs each shape on each
shared accelerator, so a site holding hundreds of fractions of different sizes would otherwise
cost as many times more."""

Held = tuple[tuple[int, int, int], ...]
"""The shapes held on one pool: `(devices, milli, node takes)`, sorted by shape."""


@dataclass(frozen=True, slots=True)
class Mix:
    """Shapes asked of one node of one accelerator model, with their counts (module
    docstring)."""

    shapes: Held = ()
    _wholes: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)
    """`(devices, count)` of the shapes of whole accelerators (0: none)."""
    _fractions: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)
    """`(milli, count)` of the shapes of a fraction."""
    _rest_per_device: int = field(init=False, repr=False, compare=False)
    """What each whole free accelerator counts against the fractions."""
    _whole_takes: int = field(init=False, repr=False, compare=False)
    """The takes of the shapes of whole accelerators, which no shared one serves."""

    def __post_init__(self) -> None:
        fractions = tuple((m, n) for _, m, n in self.shapes if m)
        object.__setattr__(self, "_wholes", tuple((d, n) for d, m, n in self.shapes if not m))
        object.__setattr__(self, "_fractions", fractions)
        object.__setattr__(self, "_rest_per_device", sum(n * (MILLI % m) for m, n in fractions))
        object.__setattr__(self, "_whole_takes", sum(n for _, m, n in self.shapes if not m))

    @classmethod
    def of(cls, helds: Iterable[Held]) -> "Mix":
        """The mix of the shapes of `helds` (one per pool of the model), counts added: the
        `MAX_SHAPES` shapes held most (the fewest devices and thousandths first on a tie)."""
        helds = [held for held in helds if held]
        if len(helds) == 1 and len(helds[0]) <= MAX_SHAPES:
            return cls(helds[0])
        counts: dict[tuple[int, int], int] = {}
        for held in helds:
            for devices, milli, count in held:
                counts[devices, milli] = counts.get((devices, milli), 0) + count
        most = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:MAX_SHAPES]
        return cls(tuple((d, m, n) for (d, m), n in sorted(most)))

    def node(self, whole: int) -> int:
        """The fragmentation of a node's `whole` free accelerators."""
        unusable = 0
        for devices, count in self._wholes:
            unusable += count * (whole if devices == 0 or whole < devices else whole % devices)
        return unusable * MILLI + whole * self._rest_per_device

    def shared(self, free: int) -> int:
        """The fragmentation of a shared accelerator with `free` thousandths free."""
        total = free * self._whole_takes
        for milli, count in self._fractions:
            total += count * (free % milli if free >= milli else free)
        return total

    def shared_growth(self, free: int, milli: int) -> int:
        """The growth when `milli` is taken of a shared accelerator with `free` free."""
        return self.shared(free - milli) - self.shared(free)

    def opened_growth(self, whole: int, milli: int) -> int:
        """The growth when `milli` is taken of one of a node's `whole` free accelerators,
        which becomes a shared one."""
        return self.node(whole - 1) - self.node(whole) + self.shared(MILLI - milli)

    def levels(self, need: int, full: int) -> Iterable[tuple[int, int]]:
        """The numbers of free units, `need` to `full`, in the order a gang asking `need` of
        each node takes nodes with them (least growth first, then fewest free), each with
        the growth when a node with that many free is taken from."""
        if not self.shapes:
            return zip(range(need, full + 1), repeat(0))
        return _levels(self, need, full)


NO_MIX: Final = Mix()
"""The empty mix: every choice is the one without it."""


@lru_cache(maxsize=1024)
def _levels(mix: Mix, need: int, full: int) -> tuple[tuple[int, int], ...]:
    """`Mix.levels` of a mix that holds something (remembered: the engine's take and the
    ledger's pick of one gang ask the same)."""
    fragments = [mix.node(k) for k in range(full + 1)]
    growths = sorted((fragments[k - need] - fragments[k], k) for k in range(need, full + 1))
    return tuple((k, growth) for growth, k in growths)
