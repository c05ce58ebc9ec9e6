"""Cases a suite does not hold, for finding one that kills a survivor: three tiers, each
cheapest first.

1. ``other_suites``: the cases of the other suites;
2. ``declared_neighbours``: new combinations of the declared axis values, every case one
   declared value away from a case of the suite;
3. ``beyond_declared``: runtime values beyond the declared ones, drawn with Hypothesis:
   context lengths around tile and block boundaries, live-row patterns, split counts,
   pool sizes. Every one is an input the op accepts (``Case.is_accepted``).
"""

from collections.abc import Callable
from dataclasses import replace

from suites.cases import AXES, SUITES, VALUES, Case, suite

# a tier's name and how it draws its cases for a suite (by name)
TIERS: dict[str, Callable[[str], list[Case]]] = {}

# pool sizes Hypothesis draws from besides the compact pool: a few spare MiB, and each side of
# 2 GiB (past it, byte offsets of the pool need 64 bits)
POOL_BYTES = (2**20, 2**24, 2**31 - 2**20, 2**31 + 2**20)
MAX_BATCH = 4
MAX_SPLITS = 8
# context lengths reach this many tiles (or blocks, whichever the length is placed on)
MAX_BOUNDARY = 6


def estimated_cost(case: Case) -> float:
    """Relative time of a case on the interpreter: every launch covers each position of the
    contexts and of the -inf fill to max_model_len for every query row and channel; a pool
    is allocated byte by byte."""
    positions = sum(case.context_lens()) + case.batch * case.max_model_len()
    launches = 3 if case.tuning() else 2
    return launches * positions * case.next_n * case.heads * case.head_dim + case.min_pool_bytes()


def static_cost(case, logits_first: bool = False) -> tuple:
    """A sortable estimate of a case's cost from its record alone, one kind before the other:
    the logits cases, by the work of their launches (``estimated_cost``), and the other kinds
    (input edits, host checks: few launches of their own). The other kinds go first unless
    ``logits_first``: where the kernel is what changed (a device mutant, whose every new
    configuration is a compile, or the interpreter, where a launch's time is its work), the
    logits cases run it on the most configurations per compile."""
    logits = isinstance(case, Case)
    return (int(logits != logits_first), estimated_cost(case) if logits else 0)


def cheapest_first(cases) -> list[Case]:
    return sorted(dict.fromkeys(cases), key=lambda case: (estimated_cost(case), case.id))


def _tier(name: str):
    def register(draw: Callable[[str], list[Case]]):
        TIERS[name] = draw
        return draw

    return register


@_tier("the other suites")
def other_suites(name: str) -> list[Case]:
    own = set(suite(name))
    return cheapest_first(case for other in SUITES if other != name for case in suite(other) if case not in own)


@_tier("new combinations of the declared axes")
def declared_neighbours(name: str) -> list[Case]:
    known = {case for other in SUITES for case in suite(other)}
    neighbours = (replace(case, **{axis.name: value}) for case in suite(name) for axis in AXES
                  for value in axis.values)
    return cheapest_first(case for case in neighbours if case not in known and case.is_accepted())


@_tier("runtime values beyond the declared ones")
def beyond_declared(name: str, count: int = 400) -> list[Case]:
    """``count`` draws (fewer once duplicates go) off the suite's cases, reproducible: the
    same suite draws the same cases, so a search resumes where it stopped."""
    from hypothesis import HealthCheck, Phase, given, settings

    bases = cheapest_first(suite(name))
    drawn = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(runtime_variant(bases))
    def collect(case: Case) -> None:
        drawn.append(case)

    collect()
    return cheapest_first(drawn)


def runtime_variant(bases: list[Case]):
    """A Hypothesis strategy: one of ``bases`` with every runtime axis drawn anew."""
    from hypothesis import assume, strategies as st

    @st.composite
    def variant(draw) -> Case:
        base = draw(st.sampled_from(bases))
        batch = draw(st.integers(1, MAX_BATCH))
        live = draw(st.none() | st.lists(st.integers(1, base.next_n), min_size=batch, max_size=batch).map(tuple))
        units = sorted({base.launcher_tuning().block_n, base.kv_block})
        floors = live or (base.next_n,) * batch
        context = tuple(max(floor, draw(st.integers(0, MAX_BOUNDARY)) * draw(st.sampled_from(units))
                            + draw(st.integers(-1, 1))) for floor in floors)
        case = replace(base, batch=batch, next_n_lens="none" if live is None else live, context=context,
                       splits=draw(st.none() | st.integers(1, MAX_SPLITS)),
                       pool=draw(st.sampled_from(("compact", *POOL_BYTES))),
                       table=draw(st.sampled_from(VALUES["table"])))
        assume(case.is_accepted())
        return case

    return variant()


def closest(case: Case, cases: list[Case]) -> tuple[Case, dict]:
    """The case of ``cases`` that differs from ``case`` on the fewest axes (the cheapest on
    ties), and ``case``'s values on those axes."""

    def differing(other: Case) -> dict:
        return {axis.name: getattr(case, axis.name) for axis in AXES if getattr(case, axis.name) != getattr(other, axis.name)}

    nearest = min(cases, key=lambda other: (len(differing(other)), estimated_cost(other), other.id))
    return nearest, differing(nearest)
