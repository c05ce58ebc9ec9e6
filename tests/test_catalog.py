"""The bug catalog pins each bug to exactly one site, or refuses to load."""

import ast
import shutil

import pytest

from mutants.catalog import CATALOG, CatalogError, catalog_mutants
from mutants.mutant import PROJECT_ROOT, read_source
from mutants.target import TRITON_TARGET
from suites.runnable import suite_cases

KERNEL = TRITON_TARGET.device_file


def test_every_bug_has_one_site_in_the_shipped_op():
    mutants = catalog_mutants()
    assert [m.id for m in mutants] == [bug.name for bug in CATALOG]
    for mutant in mutants:
        original = read_source(mutant.path)
        assert mutant.source != original
        ast.parse(mutant.source)
        changed = [line for line in mutant.diff(original).splitlines()
                   if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))]
        assert 0 < len(changed) <= 6, f"{mutant.id} changes more than its site"
        assert mutant.exposed_by and mutant.description


def test_a_spliced_site_is_what_libcst_renders_the_whole_module_with(monkeypatch):
    """The one-line sites are spliced into the file's text; the source must be the module libcst
    renders with the site replaced, for every bug."""
    from mutants import catalog

    spliced = {m.id: m.source for m in catalog_mutants()}
    monkeypatch.setattr(catalog, "_mutated_source",
                        lambda source, module, site, replacement, text: module.deep_replace(site, replacement).code)
    rendered = {m.id: m.source for m in catalog_mutants()}
    assert spliced == rendered


def _project_with_kernel(tmp_path, source: str):
    for folder in ("kernel",):
        shutil.copytree(PROJECT_ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / KERNEL).write_text(source)
    return tmp_path


def test_a_bug_whose_site_is_gone_is_an_error(tmp_path):
    source = read_source(KERNEL).replace("logits * scales", "scales * logits")
    with pytest.raises(CatalogError, match="'dropped-kv-scale' must match exactly one site .* matched nowhere"):
        catalog_mutants(_project_with_kernel(tmp_path, source))


def test_a_bug_whose_site_is_ambiguous_is_an_error(tmp_path):
    original = read_source(KERNEL)
    line = next(line for line in original.splitlines() if "tiles_per_split = tl.cdiv(context_tiles, num_splits)" in line)
    source = original.replace(line, line + "\n" + line)
    with pytest.raises(CatalogError, match=r"'floor-split' must match exactly one site .* matched line \d+, line \d+"):
        catalog_mutants(_project_with_kernel(tmp_path, source))


def test_sites_outside_kernels_do_not_count(tmp_path):
    source = read_source(KERNEL) + "\n\ndef helper(logits, scales):\n    return logits * scales\n"
    mutants = catalog_mutants(_project_with_kernel(tmp_path, source))
    assert len(mutants) == len(CATALOG)


@pytest.mark.parametrize("suite_name", ["curated", "exhaustive"])
def test_every_suite_holds_a_case_that_exposes_each_bug(suite_name):
    cases = suite_cases(suite_name)
    missing = [bug.name for bug in CATALOG if not bug.exposed_by.cases(cases)]
    assert not missing, f"suite {suite_name} has no case exposing {missing}"


def test_a_suite_without_the_exposing_case_is_found():
    """The smoke suite has no preshuffled block of several 16-token groups, nor input edits."""
    cases = suite_cases("smoke")
    missing = {bug.name for bug in CATALOG if not bug.exposed_by.cases(cases)}
    assert {"wrong-preshuffle-group-stride", "table-stride-from-shape", "context-bound-off-by-one"} <= missing
    assert "causal-off-by-one" not in missing
