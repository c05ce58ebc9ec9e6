"""The declared target: the whole op is mutated, device and host code, with ids unique across files."""

import ast
from collections import Counter

import libcst as cst
import libcst.matchers as m
import pytest

from mutants import cli
from mutants.catalog import Bug, CatalogError, Exposure, catalog_mutants
from mutants.mutant import Mutant, operator_mutants, read_source
from mutants.sets import select_mutants
from mutants.operators import GPU_OPERATORS
from mutants.walk import DEVICE, DEVICE_CODE, HOST, HOST_CODE, MODULE_LEVEL, Scope
from mutants.runner import Runner
from mutants.store import Scope as StoreScope
from mutants.store import Store
from mutants.target import TRITON_TARGET, Target, TargetFile

KERNEL = "kernel/paged_mqa_logits.py"
HOST_FILES = ("kernel/tuning.py", "kernel/validation.py")


@pytest.fixture(scope="module")
def operator_set() -> list[Mutant]:
    return operator_mutants()


def test_the_triton_target_declares_the_whole_op():
    assert TRITON_TARGET.package == "kernel"
    assert TRITON_TARGET.op == "kernel:fp8_paged_mqa_logits"
    assert TRITON_TARGET.device_file == KERNEL
    assert [file.path for file in TRITON_TARGET.files] == [KERNEL, *HOST_FILES]
    assert TRITON_TARGET.scope(KERNEL, DEVICE) == DEVICE_CODE
    for path in (KERNEL, *HOST_FILES):
        assert TRITON_TARGET.scope(path, HOST) == Scope(HOST, module_constants=True)
    with pytest.raises(LookupError, match="no device code in kernel/tuning.py"):
        TRITON_TARGET.scope("kernel/tuning.py", DEVICE)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ((TargetFile("a/k.py", (DEVICE_CODE,)), TargetFile("b/k.py", (HOST_CODE,))), "distinct names"),
        ((TargetFile("a/k.py", (DEVICE_CODE, DEVICE_CODE)),), "one scope per side"),
        ((TargetFile("a/k.py", (DEVICE_CODE,)), TargetFile("a/j.py", (DEVICE_CODE,))), "exactly one file"),
        ((TargetFile("a/k.py", (HOST_CODE,)),), "exactly one file"),
    ],
)
def test_a_target_that_would_give_ambiguous_ids_is_refused(files, message):
    with pytest.raises(ValueError, match=message):
        Target(package="a", op="a:f", files=files)


def test_operator_mutants_cover_device_and_host_code_of_every_file(operator_set):
    ids = [mutant.id for mutant in operator_set]
    assert len(ids) == len(set(ids))
    per_file = Counter((mutant.path, mutant.side) for mutant in operator_set)
    assert per_file[KERNEL, DEVICE] > 300
    for path in (KERNEL, *HOST_FILES):
        assert per_file[path, HOST] > 0, path
    assert set(per_file) == {(KERNEL, DEVICE), *((path, HOST) for path in (KERNEL, *HOST_FILES))}
    for mutant in operator_set:
        prefix = "" if mutant.side == DEVICE else mutant.path.rsplit("/", 1)[1].removesuffix(".py") + ":"
        assert mutant.id == f"{prefix}{mutant.origin}-{mutant.id.rsplit('-', 1)[1]}"
        assert mutant.id.startswith(prefix) and (":" in mutant.id) == (mutant.side == HOST)


def test_every_operator_mutant_parses_and_changes_only_its_site(operator_set):
    originals = {path: read_source(path) for path in (KERNEL, *HOST_FILES)}
    for mutant in operator_set:
        original = originals[mutant.path]
        ast.parse(mutant.source)
        lines = original.splitlines(keepends=True)
        start = sum(len(line) for line in lines[: mutant.line - 1]) + mutant.column
        assert original[start : start + len(mutant.before)] == mutant.before, mutant.id
        assert mutant.source == original[:start] + mutant.after + original[start + len(mutant.before) :]


def test_host_mutants_reach_the_launcher_tuning_defaults_and_validation(operator_set):
    wanted = {
        ("stride-from-shape", "block_table.stride(0)", "block_table.shape[0]"),
        ("default-shift", "64", "128"),
        ("dropped-guard", None, None),
        ("dropped-widening-cast", 'context_lens.to("cpu", torch.int64)', 'context_lens.to("cpu")'),
    }
    host = [m for m in operator_set if m.side == HOST]
    for origin, before, after in wanted:
        assert any(m.origin == origin and before in (None, m.before) and after in (None, m.after) for m in host), origin
    assert any("at module level" in m.description for m in host)
    block_n_default = [m for m in host if m.origin == "default-shift" and m.path == "kernel/tuning.py"
                       and m.before == "64" and m.description.endswith("in resolve_tuning()")]
    assert block_n_default and all(m.id.startswith("tuning:default-shift-") for m in block_n_default)
    assert "def plan_launch(" not in "".join(m.before for m in host)
    assert not any(m.side == HOST and m.origin in {op.name for op in GPU_OPERATORS} for m in operator_set)


def test_mutant_sets_split_by_side():
    device = select_mutants("device")
    host = select_mutants("host")
    assert device and all(m.side == DEVICE and m.path == KERNEL for m in device)
    assert host and all(m.side == HOST for m in host)
    assert all(m.side == DEVICE for m in select_mutants("gpu"))
    assert {m.side for m in select_mutants("generic")} == {DEVICE, HOST}


def test_kmut_list_reports_totals_per_file(capsys):
    assert cli.main(["list", "--mutants", "host"]) == 0
    lines = capsys.readouterr().out.splitlines()
    totals = [line for line in lines if line.startswith("kernel/") and ": " in line]
    assert [line.split(":")[0] for line in totals] == [KERNEL, *HOST_FILES]
    assert all(line.endswith(" host") for line in totals)
    assert sum(int(line.split(": ")[1].split()[0]) for line in totals) == int(lines[-1].split()[0])


def test_runner_classifies_device_mutants_only(tmp_path, monkeypatch):
    import mutants.compiled

    sent = {}

    def classify(original, group, targets, **kwargs):
        sent.update(group)
        return {mutant_id: mutants.compiled.Verdict("distinct", "sass", "") for mutant_id in group}

    monkeypatch.setattr(mutants.compiled, "classify", classify)
    monkeypatch.setattr(mutants.compiled, "compile_targets", lambda cases, **planning: [])
    device = Mutant("d", "test", KERNEL, 1, 0, "", "", "d", "", read_source(KERNEL) + "\n# d\n", DEVICE)
    host = Mutant("h", "test", HOST_FILES[0], 1, 0, "", "", "h", "", read_source(HOST_FILES[0]) + "\n# h\n", HOST)
    store = Store(tmp_path / "results.sqlite")
    runner = Runner(cases=[], device="cpu", jobs=1, store=store, scope=StoreScope("smoke", "x", "first-kill", "cpu"))
    try:
        assert runner.classify([device, host], jobs=1) == 0
    finally:
        runner.close()
    assert set(sent) == {"d"}


def _validation_bug(**changes) -> Bug:
    """A throwaway host-side bug: the input check that every tensor is on one device is gone."""
    fields = dict(
        name="devices-unchecked",
        description="tensors on different devices are accepted",
        exposed_by=Exposure("tensors on two devices", lambda case: False),
        site=m.If(test=m.Comparison(left=m.Name("device"))),
        mutate=lambda node: cst.SimpleStatementLine(body=[cst.Pass()], leading_lines=node.leading_lines),
        path="kernel/validation.py",
        side=HOST,
    )
    return Bug(**{**fields, **changes})


def test_a_catalog_bug_can_pin_a_host_site_in_validation():
    (mutant,) = catalog_mutants(catalog=(_validation_bug(),))
    original = read_source("kernel/validation.py")
    assert (mutant.id, mutant.side, mutant.path) == ("devices-unchecked", HOST, "kernel/validation.py")
    assert mutant.before.startswith("if device != common:") and mutant.after.strip() == "pass"
    assert original.splitlines()[mutant.line - 1].strip() == "if device != common:"
    assert "if device != common" not in mutant.source and "where the other tensors are" not in mutant.source
    ast.parse(mutant.source)


def test_a_catalog_bug_is_looked_for_only_in_the_code_of_its_side():
    with pytest.raises(CatalogError, match="no device code in kernel/validation.py"):
        catalog_mutants(catalog=(_validation_bug(side=DEVICE),))
    kernel_site = m.BinaryOperation(left=m.Name("logits"), operator=m.Multiply(), right=m.Name("scales")
                                    | m.Subscript(value=m.Name("scales")))
    with pytest.raises(CatalogError, match="host code of kernel/paged_mqa_logits.py; matched nowhere"):
        catalog_mutants(catalog=(_validation_bug(path=KERNEL, site=kernel_site),))
    constant = m.Assign(targets=[m.AssignTarget(m.Name("PROGRAMS_PER_SM"))])
    fewer_programs = _validation_bug(path="kernel/tuning.py", site=constant,
                                     mutate=lambda node: node.with_changes(value=cst.Integer("1")))
    (mutant,) = catalog_mutants(catalog=(fewer_programs,))
    assert mutant.after.strip() == "PROGRAMS_PER_SM = 1" and MODULE_LEVEL not in mutant.description


@pytest.mark.parametrize("name", ["triton", "gfx950"])
def test_every_tuning_a_targets_cases_pass_is_a_keyword_of_its_op(name):
    """A target's tuning mapping is its cases' ``tuning()``: the knobs each case calls the
    target's op with (the Triton op's tile, warps, stages and splits; the gfx950 kernel's
    waves, sub-tiles and splits). Each must be a keyword the op takes."""
    import importlib
    import inspect

    if name == "gfx950":
        pytest.importorskip("flydsl", reason="the gfx950 op's module imports flydsl (pip install flydsl)")
    target = cli.TARGETS[name]
    module, function = target.op.split(":")
    op = getattr(importlib.import_module(module), function)
    # named keywords, and the knobs an op taking **tuning declares beside it
    keywords = set(inspect.signature(op).parameters) | set(getattr(inspect.getmodule(op), "TUNING_KNOBS", ()))
    used = {key for suite in ("curated", "exhaustive") for case in target.cases(suite)
            if hasattr(case, "tuning") for key in case.tuning()}
    assert used and used <= keywords, used - keywords


def _methods(source: str) -> dict[str, range]:
    """Every method of the module's classes, as `Class.method`, with the lines it spans."""
    return {
        f"{cls.name}.{method.name}": range(method.lineno, method.end_lineno + 1)
        for cls in ast.parse(source).body if isinstance(cls, ast.ClassDef)
        for method in cls.body if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def test_host_mutants_reach_every_method_of_the_launchers_classes(operator_set):
    """A walk that skipped class bodies would leave methods such as `Launch.run` (which picks
    the device a launch runs on) without a mutant, and EQUIVALENT.md's survivor
    `paged_mqa_logits:comparison-negate-0` in it would silently vanish from the score."""
    methods = _methods(read_source(KERNEL))
    assert "Launch.run" in methods
    host_lines = {m.line for m in operator_set if m.path == KERNEL and m.side == HOST}
    for name, lines in methods.items():
        assert host_lines & set(lines), f"no host mutant in {name}"
    (negated,) = [m for m in operator_set if m.id == "paged_mqa_logits:comparison-negate-0"]
    assert negated.line in methods["Launch.run"] and negated.description.endswith("in run()")
