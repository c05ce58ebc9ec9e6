"""kmut curate: values beyond the declared axes, the curated additions' data, the candidate
tiers, and the search (budget per tier, the unmutated kernel first, resuming from the store)."""

import json
from dataclasses import replace

import pytest

from kernel.validation import check_inputs
from mutants.curate import ORIGINAL, Lead, describe, exposing_axes, search
from mutants.mutant import Mutant
from mutants.outcomes import TIMEOUT
from mutants.runner import CaseRecord
from mutants.store import Scope, Store, Try
from mutants.worker import ERROR, FAIL, PASS, STILLBORN
from suites.candidates import beyond_declared, closest, declared_neighbours, other_suites
from suites.cases import BASE, SUITES, Case, add_case, added_cases, suite
from suites.check import build_inputs

SMALL = replace(BASE, heads=32, head_dim=64, block_n=16)
BEYOND = replace(SMALL, batch=3, context=(15, 17, 33), next_n_lens=(2, 1, 2), splits=5, pool=2**24)


def test_a_written_record_reads_back_as_the_same_case(tmp_path):
    path = tmp_path / "additions.json"
    assert add_case(BEYOND, kills="some-mutant", exposed_by="ctx_15.17.33", path=path)
    assert not add_case(BEYOND, kills="some-mutant", exposed_by="ctx_15.17.33", path=path)
    (read,) = added_cases(path)
    assert read == BEYOND and read.id == BEYOND.id
    assert "ctx_15.17.33" in read.id and "nnl_2.1.2" in read.id and "pool_16777216" in read.id
    assert json.loads(path.read_text())["cases"][0]["kills"] == "some-mutant"


def test_a_record_that_reads_back_as_another_case_is_an_error(tmp_path):
    path = tmp_path / "additions.json"
    add_case(BEYOND, kills="some-mutant", exposed_by="", path=path)
    record = json.loads(path.read_text())
    record["cases"][0]["values"]["splits"] = 6
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="reads back as the case"):
        added_cases(path)


def test_values_beyond_the_declared_ones_are_checked_as_the_op_checks_them():
    assert BEYOND.is_accepted()
    assert BEYOND.context_lens() == [15, 17, 33] and BEYOND.live_rows() == [2, 1, 2]
    assert not replace(BEYOND, context=(15, 17)).is_accepted()  # one length per sequence
    assert not replace(BEYOND, context=(1, 17, 33)).is_accepted()  # fewer tokens than live rows
    assert not replace(BEYOND, next_n_lens=(3, 1, 2)).is_accepted()  # more live rows than next_n
    assert not replace(BEYOND, splits=0).is_accepted()
    assert not replace(BEYOND, pool=-1).is_accepted()


def test_every_value_drawn_beyond_the_declared_ones_is_an_input_the_op_accepts():
    drawn = beyond_declared("smoke", count=60)
    assert len(drawn) > 20
    assert any(isinstance(case.context, tuple) and len(case.context) > 2 for case in drawn)
    for case in drawn:
        assert case.is_accepted(), case.id
        if case.min_pool_bytes() < 2**30:  # the >2 GiB pools only cost memory here
            inputs = build_inputs(case)
            check_inputs(*inputs.op_args(), **inputs.op_kwargs(), out=None, check_values=True)


def test_the_first_tiers_hold_cases_the_suite_does_not():
    own = set(suite("smoke"))
    others = other_suites("smoke")
    assert others and not own & set(others)
    every_suite = {case for name in SUITES for case in suite(name)}
    neighbours = declared_neighbours("smoke")
    assert neighbours and not every_suite & set(neighbours)
    assert all(sum(getattr(n, f) != getattr(c, f) for f in Case.__dataclass_fields__) >= 1 for n in neighbours[:5]
               for c in own)


def test_the_exposing_axes_are_those_off_the_closest_case():
    nearest, differing = closest(replace(SMALL, splits=7), [SMALL, replace(SMALL, heads=64)])
    assert nearest == SMALL and differing == {"splits": 7}
    assert exposing_axes(replace(SMALL, splits=7, context=(40, 3)), [SMALL]).startswith("ctx_40.3 split7 (off ")


class FakeRunner:
    """The runner's search interface: the unmutated kernel fails the cases in ``broken`` (a
    set, or how by case id); a mutant fails the cases its ``kills`` says; every case takes
    ``seconds``."""

    def __init__(self, broken=(), kills=None, seconds=1.0):
        self.cases, self.case_ids, self.case_seconds = [], [], {}
        self.broken = broken if isinstance(broken, dict) else dict.fromkeys(broken, FAIL)
        self.kills, self.seconds = kills or {}, seconds
        self.baselined, self.tried = [], []

    def add_cases(self, cases):
        start = len(self.cases)
        self.cases += cases
        self.case_ids += [c.id for c in cases]
        return list(range(start, len(self.cases)))

    def baseline_cases(self, indices):
        self.baselined += [self.case_ids[i] for i in indices]
        return {i: CaseRecord(self.broken.get(self.case_ids[i], PASS), "", self.seconds) for i in indices}

    def try_cases(self, cases_of, mutants):
        results = {}
        for mutant_id, indices in cases_of.items():
            results[mutant_id] = {}
            for i in indices:
                self.tried.append((mutant_id, self.case_ids[i]))
                killed = self.case_ids[i] in self.kills.get(mutant_id, ())
                results[mutant_id][i] = CaseRecord(FAIL if killed else PASS, "wrong cell" if killed else "", self.seconds)
                if killed:
                    break
        return results

    def timeout_for(self, index):
        return 10.0


def mutant(name: str) -> Mutant:
    return Mutant(name, "test", "kernel/tuning.py", 1, 0, "", "", name, "", f"# {name}\n")


CANDIDATES = [replace(SMALL, splits=n) for n in range(1, 9)]


def test_only_a_failure_or_a_compile_error_kills_a_survivor_in_a_search():
    """A candidate the mutant ran out of time on is no kill: the survivor is slow there, or
    the machine was, and `curate --write` would add a case that does not fail it."""
    mutant = Mutant("m", "test", "kernel/paged_mqa_logits.py", 1, 0, "a", "b", "d", "", "x = 1\n")
    tries = {case: Try(case, result, 1.0, "", {}) for case, result in (("c0", PASS), ("c1", TIMEOUT), ("c2", ERROR))}
    assert Lead(mutant, tries).killer is None
    tries["c3"] = Try("c3", STILLBORN, 1.0, "", {})
    tries["c4"] = Try("c4", FAIL, 1.0, "", {})
    assert Lead(mutant, tries).killer.case_id == "c3"


def test_search_skips_what_the_kernel_fails_finds_the_kill_and_reports_the_rest(tmp_path):
    store, scope = Store(tmp_path / "r.sqlite"), Scope("smoke", "d", "first-kill", "cpu")
    runner = FakeRunner(broken={CANDIDATES[0].id}, kills={"a": {CANDIDATES[5].id, CANDIDATES[6].id}})
    leads = search(runner, store, scope, [mutant("a"), mutant("b")], {"tier one": CANDIDATES}, budget=100,
                   batch=3, report=lambda line: None)
    found, missed = leads
    assert found.killer.case_id == CANDIDATES[5].id and missed.killer is None
    assert ("a", CANDIDATES[0].id) not in runner.tried  # the kernel failed it: it kills nothing
    assert ("a", CANDIDATES[6].id) not in runner.tried  # a killed survivor stops
    assert len(missed.tries) == 7 and missed.spent == 7.0
    text, case, exposed = describe(found, [SMALL])
    assert case == CANDIDATES[5] and exposed.startswith("split6")
    assert describe(missed, [SMALL])[0].startswith("b: no killing case found in 7 cases, 7 s (tier one: 7 cases")


@pytest.mark.parametrize("how", [TIMEOUT, ERROR, STILLBORN])
def test_a_candidate_the_unmutated_kernel_does_not_pass_kills_nothing_however_it_did_not(tmp_path, how):
    """Only a case the original passes shows the survivor wrong: one the original ran out of
    time on, crashed on or could not compile would be written into curated as a killer."""
    store, scope = Store(tmp_path / "r.sqlite"), Scope("smoke", "d", "first-kill", "cpu")
    runner = FakeRunner(broken={CANDIDATES[0].id: how}, kills={"a": {CANDIDATES[0].id, CANDIDATES[3].id}})
    (lead,) = search(runner, store, scope, [mutant("a")], {"tier": CANDIDATES}, budget=100, batch=2,
                     report=lambda line: None)
    assert ("a", CANDIDATES[0].id) not in runner.tried
    assert lead.killer.case_id == CANDIDATES[3].id


def test_a_search_at_another_digest_asks_the_unmutated_kernel_again(tmp_path):
    """The kernel, oracle or suites changed between the two searches: what the old checkout
    passed says nothing of the new one, nor what a survivor of the old one failed."""
    store = Store(tmp_path / "r.sqlite")
    old, new = (Scope("smoke", digest, "first-kill", "cpu") for digest in ("d-old", "d-new"))
    search(FakeRunner(), store, old, [mutant("a")], {"tier": CANDIDATES}, budget=4, batch=2, report=lambda line: None)
    assert store.tries(new, ORIGINAL) == {} and store.tries(new, mutant("a").key) == {}
    again = FakeRunner(broken={CANDIDATES[1].id})
    (lead,) = search(again, store, new, [mutant("a")], {"tier": CANDIDATES}, budget=4, batch=2,
                     report=lambda line: None)
    assert again.baselined[:4] == [c.id for c in CANDIDATES[:4]]
    assert ("a", CANDIDATES[1].id) not in again.tried and ("a", CANDIDATES[0].id) in again.tried


def test_each_tier_spends_its_share_of_the_budget(tmp_path):
    store, scope = Store(tmp_path / "r.sqlite"), Scope("smoke", "d", "first-kill", "cpu")
    second = [replace(c, heads=64) for c in CANDIDATES]
    leads = search(FakeRunner(), store, scope, [mutant("a")], {"first": CANDIDATES, "second": second}, budget=8,
                   batch=2, report=lambda line: None)
    tiers = [t.tier for t in leads[0].tries.values()]
    assert tiers.count("first") == 4 and tiers.count("second") == 4


def test_an_interrupted_search_resumes_from_the_store(tmp_path):
    store, scope = Store(tmp_path / "r.sqlite"), Scope("smoke", "d", "first-kill", "cpu")
    search(FakeRunner(), store, scope, [mutant("a")], {"tier": CANDIDATES}, budget=4, batch=2,
           report=lambda line: None)
    again = FakeRunner()
    (lead,) = search(again, store, scope, [mutant("a")], {"tier": CANDIDATES}, budget=8, batch=2,
                     report=lambda line: None)
    assert again.baselined == [c.id for c in CANDIDATES[4:]]
    assert [case_id for _, case_id in again.tried] == [c.id for c in CANDIDATES[4:]]
    assert len(lead.tries) == 8 and set(store.tries(scope, ORIGINAL)) == {c.id for c in CANDIDATES}
