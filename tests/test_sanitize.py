"""The CUDA memory checker's plumbing, on a machine without a GPU: finding the sanitizer,
reading its findings, tracing a finding to its case."""

import stat

import pytest

import mutants.sanitize as sanitize
from mutants.sanitize import FINDING_EXIT, Finding, SanitizerMissing, find_sanitizer, memcheck, parse_findings
from suites.cases import smoke

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
