"""The CUDA memory checker's plumbing, on a machine without a GPU: finding the sanitizer,
reading its findings, tracing a finding to its case."""

import stat
import sys

import pytest

import mutants.sanitize as sanitize
from mutants.sanitize import FINDING_EXIT, Finding, SanitizerMissing, find_sanitizer, memcheck, parse_findings
from suites.cases import smoke
from suites.runnable import checked_off_the_device, suite_cases

MEMCHECK_OUTPUT = """\
========= COMPUTE-SANITIZER
kmut-sanitize-case first-case
kmut-sanitize-case second-case
========= Invalid __global__ read of size 4 bytes
=========     at _paged_mqa_logits_kernel+0x1c30
=========     by thread (96,0,0) in block (1,0,0)
=========     Address 0x7f0a00003000 is out of bounds
kmut-sanitize-case third-case
========= ERROR SUMMARY: 1 error
"""


def test_the_first_finding_names_the_case_it_happened_in():
    finding = parse_findings(MEMCHECK_OUTPUT)
    assert finding == Finding("second-case", "Invalid __global__ read of size 4 bytes\n"
                                             "at _paged_mqa_logits_kernel+0x1c30\nby thread (96,0,0) in block (1,0,0)")


def test_clean_output_has_no_finding():
    assert parse_findings("========= COMPUTE-SANITIZER\nkmut-sanitize-case a\n========= ERROR SUMMARY: 0 errors\n") is None


def test_a_machine_without_the_sanitizer_gets_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sanitize, "SANITIZER_PLACES", (str(tmp_path),))
    with pytest.raises(SanitizerMissing, match="no compute-sanitizer"):
        find_sanitizer()


def test_memcheck_reads_a_finding_from_the_sanitizer_process(tmp_path):
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(f"#!/bin/sh\ncat <<'END'\n{MEMCHECK_OUTPUT}END\nexit {FINDING_EXIT}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    finding = memcheck(str(tmp_path), smoke()[:1], sanitizer=str(fake), timeout=30, root=tmp_path)
    assert finding is not None and finding.case_id == "second-case"
    fake.write_text("#!/bin/sh\necho '========= ERROR SUMMARY: 0 errors'\nexit 0\n")
    assert memcheck(str(tmp_path), smoke()[:1], sanitizer=str(fake), timeout=30, root=tmp_path) is None


def test_memcheck_hands_a_whole_suite_to_the_sanitizer(tmp_path):
    """Curated's 1,100 cases as one command-line argument passed the system's limit
    ("Argument list too long"): they travel in a file."""
    cases = suite_cases("curated")
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(f"#!/bin/sh\n{sys.executable} -c 'import json, sys; print(\"kmut-sanitize-case\","
                    f" len(json.load(open(sys.argv[1]))))' \"$(eval echo \\${{$#}})\"\n"
                    f"echo '========= Invalid __global__ read of size 1 bytes'\nexit {FINDING_EXIT}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    finding = memcheck(str(tmp_path), cases, sanitizer=str(fake), timeout=60, root=tmp_path)
    # every case but those that run nothing on the device
    assert finding is not None and finding.case_id == str(len([c for c in cases if not checked_off_the_device(c)]))


def test_a_survivor_with_an_invalid_access_is_killed_and_a_clean_one_is_not_checked_again(tmp_path):
    from mutants.mutant import Mutant, read_source
    from mutants.runner import Runner
    from mutants.store import Result, Scope, Store
    from mutants.target import TRITON_TARGET

    cases = smoke()
    store = Store(tmp_path / "results.sqlite")
    scope = Scope("smoke", "digest", "first-kill", "cuda")
    source = read_source(TRITON_TARGET.device_file) + "\n# reads past q\n"
    mutant = Mutant("reads-past-q", "test", TRITON_TARGET.device_file, 1, 0, "", "", "reads past q", "", source)
    store.save(scope, Result(mutant.key, mutant.id, "survived", "", [], 1.0, {}))
    fake = tmp_path / "compute-sanitizer"
    finding = MEMCHECK_OUTPUT.replace("second-case", cases[1].id)
    ran = tmp_path / "ran"
    fake.write_text(f"#!/bin/sh\ntouch {ran}\ncat <<'END'\n{finding}END\nexit {FINDING_EXIT}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    runner = Runner(cases=cases, device="cuda", jobs=1, store=store, scope=scope)
    shown = []
    try:
        assert runner.sanitize([mutant], sanitizer=str(fake),
                               progress=lambda *tick: shown.append((*tick, ran.exists()))) == 1
        assert shown == [("memcheck", 0, 1, False), ("memcheck", 1, 1, True)]  # the clock starts before the check
        (result,) = store.results(scope, {mutant.key: mutant.id}).values()
        assert result.outcome == "killed" and result.killed_by == [cases[1].id]
        assert "memcheck: Invalid __global__ read" in result.detail

        store.save(scope, Result(mutant.key, mutant.id, "survived", "", [], 1.0, {}))
        fake.write_text("#!/bin/sh\nexit 0\n")
        assert runner.sanitize([mutant], sanitizer=str(fake)) == 0
        fake.write_text(f"#!/bin/sh\ncat <<'END'\n{finding}END\nexit {FINDING_EXIT}\n")  # a second check would kill
        assert runner.sanitize([mutant], sanitizer=str(fake)) == 0
        (result,) = store.results(scope, {mutant.key: mutant.id}).values()
        assert result.outcome == "survived" and result.detail.startswith("memcheck: no invalid access")
    finally:
        runner.close()


def test_sanitize_is_for_cuda_runs(capsys):
    from mutants import cli

    assert cli.main(["run", "--suite", "smoke", "--device", "cpu", "--sanitize"]) == cli.EXIT_USAGE
    assert capsys.readouterr().err.splitlines()[-1].startswith("kmut: error: --sanitize checks CUDA runs")


def test_a_memcheck_that_times_out_is_no_finding(tmp_path):
    """A survivor that is only slow under compute-sanitizer made no invalid access that anyone
    saw: a check that runs out of time must not report a finding (which would kill it)."""
    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/bin/sh\necho 'kmut-sanitize-case slow-case'\nsleep 30\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    assert memcheck(str(tmp_path), smoke()[:1], sanitizer=str(fake), timeout=1, root=tmp_path) is None
