"""The HTML report, from synthetic mutants and results: content, escaping, the kill matrix,
and a screenshot taken by headless Chromium."""

import re
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from mutants.html import case_labels, html_report, score_colour
from mutants.mutant import Mutant
from mutants.report import Scored
from mutants.store import Result

CHROMIUM = Path("/usr/bin/chromium")
WINDOW = (1400, 1000)

KERNEL_PATH = "kernel/demo.py"
ORIGINAL = """\
def masked_sum(offs, n, valid):
    mask = offs < n & valid
    total = 0
    for i in range(n):
        total += i * mask
    return total
"""

CASES = ["h32-d64-b2-nn2-pool_compact", "h64-d64-b2-nn2-pool_compact", "h32-d128-b2-nn2-pool_compact",
         "h32-d64-b1-nn2-pool_over&2gib"]
CASE_0, CASE_1, CASE_2, CASE_3 = CASES


def mutant(mutant_id: str, line: int, after: str, description: str) -> Mutant:
    lines = ORIGINAL.splitlines(keepends=True)
    before = lines[line - 1]
    lines[line - 1] = after + "\n"
    return Mutant(id=mutant_id, origin="test", path=KERNEL_PATH, line=line, column=0, before=before.rstrip("\n"),
                  after=after, description=description, exposed_by="", source="".join(lines))


def result(m: Mutant, outcome: str, *, detail: str = "", killed_by=(), case_results=None) -> Result:
    return Result(m.key, m.id, outcome, detail, list(killed_by), 1.5, dict(case_results or {}))


def all_pass(*case_ids: str) -> dict[str, str]:
    return {case_id: "pass" for case_id in case_ids}


KILLED_TWICE = mutant("sub-for-add", 5, "        total -= i * mask", "+= becomes -= in masked_sum()")
KILLED_ONCE = mutant("zero-init", 3, "    total = 1", "constant 0 becomes 1 in masked_sum()")
SURVIVOR = mutant("lt-to-le", 2, '    mask = offs <= n & valid  # "edge"',
                  'boundary <script>alert(1)</script> & "quoted" in masked_sum()')
TIMED_OUT = mutant("square-range", 4, "    for i in range(n * n):", "range grows in masked_sum()")
CRASHER = mutant("none-total", 3, "    total = None", "constant becomes None in masked_sum()")
STILLBORN = mutant("bad-type", 2, "    mask = offs < n & 1.5", "int becomes float in masked_sum()")
EQUIVALENT = mutant("same-code", 6, "    return (total)", "parenthesised return in masked_sum()")
DUPLICATE = mutant("dup-sub", 5, "        total = total - i * mask", "-= spelled out in masked_sum()")
NOT_RUN = mutant("never", 6, "    return -total", "negated return in masked_sum()")

RESULTS = {
    KILLED_TWICE: result(KILLED_TWICE, "killed", detail=f"{CASE_1}: mismatch", killed_by=[CASE_1, CASE_2],
                         case_results={CASE_0: "pass", CASE_1: "fail", CASE_2: "fail", CASE_3: "pass"}),
    KILLED_ONCE: result(KILLED_ONCE, "killed", detail=f"{CASE_0}: mismatch", killed_by=[CASE_0],
                        case_results={CASE_0: "fail", **all_pass(CASE_1, CASE_2, CASE_3)}),
    SURVIVOR: result(SURVIVOR, "survived", case_results=all_pass(*CASES)),
    TIMED_OUT: result(TIMED_OUT, "timeout", detail=f"{CASE_1}: no answer within 30 s",
                      case_results={CASE_0: "pass", CASE_1: "timeout"}),
    CRASHER: result(CRASHER, "crashed", detail=f"{CASE_0}: TypeError: unsupported operand <NoneType> & int",
                    case_results={CASE_0: "error"}),
    STILLBORN: result(STILLBORN, "stillborn", detail="ttir: error: operand types <i32> & <f32> differ"),
    EQUIVALENT: result(EQUIVALENT, "equivalent", detail='ptx: identical to the original ("sha 1f2e")'),
    DUPLICATE: result(DUPLICATE, "duplicate", detail="ptx: identical to sub-for-add"),
    NOT_RUN: None,
}
SURVIVORS = (SURVIVOR, TIMED_OUT, CRASHER)
CLASSIFIED = (STILLBORN, EQUIVALENT, DUPLICATE)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    kernel_file = tmp_path / "src" / KERNEL_PATH
    kernel_file.parent.mkdir(parents=True)
    kernel_file.write_text(ORIGINAL)
    return tmp_path / "src"


def scored(suite: str = "curated", wall_seconds: float | None = 90.0) -> Scored:
    return Scored(suite, "cuda", "matrix", "catalog", list(RESULTS.items()), list(CASES), wall_seconds, len(RESULTS))


def section(page: str, heading_start: str) -> str:
    """The page from the heading that starts with ``heading_start`` to the next heading."""
    match = re.search(rf"<h3[^>]*>{re.escape(heading_start)}.*?(?=<h3|</section>)", page, re.S)
    assert match, f"no section headed {heading_start!r}"
    return match.group(0)


class TagCollector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def tags(page: str) -> list[tuple[str, dict]]:
    collector = TagCollector()
    collector.feed(page)
    return collector.tags


def test_header_shows_score_counts_and_throughput(root):
    page = html_report([scored()], root=root)
    # 2 killed of killed + survived + timeout + crashed = 5
    assert "40.0%" in page
    assert "2 killed of 5 scored" in page
    for count, outcome in ((2, "killed"), (1, "survived"), (1, "timeout"), (1, "crashed"), (1, "stillborn"),
                           (1, "equivalent"), (1, "duplicate"), (1, "not run")):
        assert f"<b>{count}</b>{outcome}</li>" in page
    assert "<b>6.0</b> mutants/minute (90 s wall for the 9 mutants the run decided)" in page
    assert "<b>33%</b> classified without running a case (3 of 9)" in page
    assert "1 of 9 mutants have not run yet" in page


def test_unknown_throughput_is_said_so(root):
    assert "throughput not recorded" in html_report([scored(wall_seconds=None)], root=root)


def test_every_survivor_shows_its_escaped_diff(root):
    page = html_report([scored()], root=root)
    survivors = section(page, "Survived, timed out or crashed (3)")
    for m in SURVIVORS:
        assert f"<code>{m.id}</code>" in survivors
        for line in m.diff(ORIGINAL).splitlines():
            assert f"{escape(line)}</span>" in survivors
    assert '<span class="add">+    mask = offs &lt;= n &amp; valid  # &quot;edge&quot;</span>' in survivors
    assert '<span class="del">-    mask = offs &lt; n &amp; valid</span>' in survivors
    assert "TypeError: unsupported operand &lt;NoneType&gt; &amp; int" in survivors
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quoted&quot;" in page
    assert '# "edge"' not in page


def test_classified_mutants_name_the_artifact_that_decided_them(root):
    classified = section(html_report([scored()], root=root), "Classified without running a case (3)")
    for m in CLASSIFIED:
        assert f"<code>{m.id}</code>" in classified
        assert escape(RESULTS[m].detail) in classified
    for m in (*SURVIVORS, KILLED_TWICE, NOT_RUN):
        assert f"<code>{m.id}</code>" not in classified


def test_kill_matrix_fills_one_rect_per_kill(root):
    page = html_report([scored()], root=root)
    matrix = section(page, "Kill matrix")
    svgs = [ET.fromstring(svg) for svg in re.findall(r"<svg .*?</svg>", matrix, re.S)]
    rects = [r.get("class") for svg in svgs for r in svg.iter("{http://www.w3.org/2000/svg}rect")]
    kills = sum(len(r.killed_by) for r in RESULTS.values() if r)
    assert kills == 3 and rects.count("kill") == kills
    # passes: 2 + 3 + 4 (survivor) + 1 (timeout); faults: the timeout and the crash
    assert rects.count("pass") == 10 and rects.count("fault") == 2
    titles = {t.text for svg in svgs for t in svg.iter("{http://www.w3.org/2000/svg}title")}
    assert set(CASES) <= titles
    labels = [t.text for svg in svgs if svg.get("class") == "mutant-labels"
              for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert labels == [m.id for m in RESULTS if m not in CLASSIFIED]


def test_cases_that_kill_nothing_are_listed(root):
    idle = section(html_report([scored()], root=root), "Cases that kill nothing (1 of 4)")
    assert f"<code>{escape(CASE_3)}</code>" in idle
    assert escape(CASE_0) not in idle


def test_column_labels_leave_out_what_most_cases_share():
    labels, shared = case_labels(CASES)
    assert shared == ["b2", "d64", "h32", "nn2", "pool_compact"]
    assert labels == ["1 (shared parts only)", "2 h64", "3 d128", "4 b1-pool_over&2gib"]


def test_several_runs_are_compared_at_the_top(root):
    page = html_report([scored("curated"), scored("exhaustive", wall_seconds=None)], root=root)
    table = page[page.index('<table class="comparison">'):page.index('<section class="run"')]
    assert '<a href="#run-1">curated</a>' in table and '<a href="#run-2">exhaustive</a>' in table
    assert table.count("<b>40.0%</b>") == 2
    assert '<section class="run" id="run-2">' in page


def test_a_large_matrix_scrolls_instead_of_shrinking(root):
    case_ids = [f"h32-d64-b{j}" for j in range(100)]
    rows = [(m, Result(m.key, m.id, "killed", killed_by=case_ids[i % 100:i % 100 + 1],
                       case_results={c: "pass" for c in case_ids[:i % 100]}))
            for i in range(300) for m in [mutant(f"m-{i}", 3, f"    total = {i}", "constant")]]
    page = html_report([Scored("big", "cuda", "matrix", "operators", rows, case_ids)], root=root)
    cells = next(attrs for tag, attrs in tags(page) if tag == "svg" and attrs.get("class") == "cells")
    assert (cells["width"], cells["height"]) == ("1200", "3600")
    assert '<div class="matrix-scroll">' in page
    assert len(page) < 4_000_000


def test_page_is_self_contained(root):
    page = html_report([scored()], root=root)
    assert "<script" not in page and "@import" not in page and "url(" not in page
    assert not [attrs for _, attrs in tags(page) if "src" in attrs or attrs.get("rel") == "stylesheet"]


# -- the page in a real browser --

def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit truecolour PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    chunks, offset = {}, 8
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        chunks.setdefault(kind, []).append(data[offset + 8:offset + 8 + length])
        offset += 12 + length
    width, height, depth, colour_type = struct.unpack(">IIBB", chunks[b"IHDR"][0][:10])
    assert depth == 8 and colour_type in (2, 6), f"unexpected PNG format: depth {depth}, colour type {colour_type}"
    pixel = 3 if colour_type == 2 else 4
    raw = zlib.decompress(b"".join(chunks[b"IDAT"]))
    stride = width * pixel
    rows, previous = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        row = unfilter(raw[start], bytearray(raw[start + 1:start + 1 + stride]), previous, pixel)
        rows.append(bytes(row))
        previous = row
    return width, height, rows


def unfilter(kind: int, row: bytearray, above: bytearray, pixel: int) -> bytearray:
    if kind == 1:
        for i in range(pixel, len(row)):
            row[i] = (row[i] + row[i - pixel]) & 0xFF
    elif kind == 2:
        row = bytearray((a + b) & 0xFF for a, b in zip(row, above))
    elif kind == 3:
        for i in range(len(row)):
            left = row[i - pixel] if i >= pixel else 0
            row[i] = (row[i] + ((left + above[i]) >> 1)) & 0xFF
    elif kind == 4:
        for i in range(len(row)):
            left = row[i - pixel] if i >= pixel else 0
            upper_left = above[i - pixel] if i >= pixel else 0
            estimate = left + above[i] - upper_left
            distances = (abs(estimate - left), abs(estimate - above[i]), abs(estimate - upper_left))
            nearest = (left, above[i], upper_left)[distances.index(min(distances))]
            row[i] = (row[i] + nearest) & 0xFF
    return row


def screenshot(page: Path, png: Path, profile: Path) -> None:
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
               page.as_uri()]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 0 and png.exists(), f"chromium failed:\n{finished.stderr[-2000:]}"


def test_chromium_renders_a_readable_page(root, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip(f"chromium not installed: {CHROMIUM} is missing")
    report = scored()
    page, png = tmp_path / "report.html", tmp_path / "report.png"
    page.write_text(html_report([report, scored("exhaustive")], root=root))
    screenshot(page, png, tmp_path / "profile")

    width, height, rows = read_png(png)
    assert (width, height) == WINDOW
    pixel = len(rows[0]) // width
    colours = {row[i:i + 3] for row in rows[::4] for i in range(0, len(row), pixel * 4)}
    assert len(colours) > 20, f"the screenshot looks blank: {len(colours)} distinct colours"
    score_rgb = bytes.fromhex(score_colour(report.score).lstrip("#"))
    score_pixels = sum(row[i:i + 3] == score_rgb for row in rows for i in range(0, len(row), pixel))
    assert score_pixels > 5000, f"the score box ({score_colour(report.score)}) is missing: {score_pixels} pixels"
