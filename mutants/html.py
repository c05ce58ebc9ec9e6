"""The HTML report: one self-contained page (inline CSS and SVG, no scripts, nothing fetched).

For each scored run, one after another under a comparison table:
- the score, killed / (all - equivalent - stillborn - duplicate), with every outcome's count,
  the throughput and the share of mutants classified without running a case;
- the diff of every mutant that survived, timed out or crashed;
- the kill matrix as an SVG grid (mutants as rows, cases as columns) and the cases that kill nothing;
- the mutants classified from their compiled code, each with the artifact that decided it.
"""

from collections import Counter
from dataclasses import dataclass
from html import escape
from pathlib import Path

from mutants.mutant import PROJECT_ROOT, Mutant, read_source
from mutants.outcomes import (CLASSIFIED, CRASHED, DUPLICATE, EQUIVALENT, KILLED, NEEDS_GFX950, OUTCOMES, STILLBORN,
                              SURVIVED, TIMEOUT, CaseResult)
from mutants.report import Scored
from mutants.store import Result

NOT_RUN = "not run"

OUTCOME_COLOURS = {
    KILLED: "#1a7f37",
    SURVIVED: "#cf222e",
    TIMEOUT: "#bc4c00",
    CRASHED: "#8250df",
    STILLBORN: "#6e7781",
    EQUIVALENT: "#0969da",
    DUPLICATE: "#9a6700",
    NEEDS_GFX950: "#bf8700",
    NOT_RUN: "#afb8c1",
}

# The thresholds the mutation-testing-elements JSON declares (high 90, low 70).
SCORE_BANDS = ((90.0, "#1a7f37"), (70.0, "#9a6700"), (0.0, "#cf222e"))

DETAIL_LIMIT = 4000

# Kill matrix geometry, in pixels.
CELL = 12
LABEL_CHARS = 36
CHAR_WIDTH = 6.4  # 10.5 px monospace
FOOTER_HEIGHT = 40
FOOTER_LABEL = "kills per case"

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2328;
       margin: 0; padding: 24px 32px; background: #f6f8fa; }
h1 { font-size: 22px; margin: 0 0 16px; }
h2 { font-size: 19px; margin: 0; }
h3 { font-size: 16px; margin: 28px 0 10px; }
code, pre, .mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12.5px; }
section.run { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 20px 24px; margin: 0 0 28px; }
table { border-collapse: collapse; }
th, td { text-align: left; padding: 5px 12px; border-bottom: 1px solid #d8dee4; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.comparison { background: #fff; border: 1px solid #d0d7de; margin-bottom: 28px; }
.headline { display: flex; gap: 28px; align-items: stretch; margin-top: 14px; flex-wrap: wrap; }
.score { color: #fff; border-radius: 8px; padding: 10px 22px; min-width: 170px; }
.score .value { font-size: 46px; font-weight: 700; line-height: 1.1; font-variant-numeric: tabular-nums; }
.score .of { font-size: 13px; opacity: .92; }
.facts { flex: 1; min-width: 420px; }
.meta { color: #57606a; margin: 4px 0 0; }
ul.counts { list-style: none; display: flex; flex-wrap: wrap; gap: 8px; padding: 0; margin: 0 0 10px; }
ul.counts li { border: 1px solid #d0d7de; border-left: 6px solid var(--c); border-radius: 4px; padding: 2px 10px; }
ul.counts li.zero { opacity: .45; }
ul.counts b { font-size: 17px; margin-right: 4px; font-variant-numeric: tabular-nums; }
.bar { display: flex; height: 12px; border-radius: 3px; overflow: hidden; background: #eaeef2; margin: 0 0 10px; }
.bar span { background: var(--c); }
.notice { background: #fff8c5; border: 1px solid #d4a72c; border-radius: 6px; padding: 6px 12px; }
.badge { display: inline-block; color: #fff; background: var(--c); border-radius: 10px; padding: 0 9px;
         font-size: 12px; font-weight: 600; }
article.mutant { border: 1px solid #d0d7de; border-radius: 6px; margin: 0 0 14px; overflow: hidden; }
article.mutant header { background: #f6f8fa; padding: 8px 12px; border-bottom: 1px solid #d0d7de; }
article.mutant header code { font-weight: 600; }
article.mutant .where { color: #57606a; float: right; }
pre { margin: 0; padding: 8px 0; overflow-x: auto; tab-size: 4; }
pre.detail { padding: 8px 12px; background: #fff8f5; color: #6e2a00; white-space: pre-wrap;
             border-bottom: 1px solid #d0d7de; }
pre.diff span { display: block; padding: 0 12px; min-height: 1.45em; white-space: pre; }
pre.diff .add { background: #dafbe1; color: #116329; }
pre.diff .del { background: #ffebe9; color: #a40e26; }
pre.diff .hunk { background: #ddf4ff; color: #0550ae; }
pre.diff .file { color: #57606a; font-weight: 600; }
td.decided code { white-space: pre-wrap; word-break: break-word; }
details summary { cursor: pointer; color: #0969da; }
details pre.diff { border: 1px solid #d0d7de; border-radius: 6px; margin-top: 6px; }
.legend { display: flex; gap: 18px; flex-wrap: wrap; margin: 0 0 8px; color: #57606a; }
.legend i { display: inline-block; width: 11px; height: 11px; margin-right: 5px; vertical-align: -1px;
            border: 1px solid #d0d7de; }
.matrix-scroll { overflow: auto; max-height: 82vh; border: 1px solid #d0d7de; border-radius: 6px; background: #fff; }
.matrix-grid { display: grid; width: max-content; }
.matrix-grid svg { display: block; background: #fff; }
svg.corner { position: sticky; top: 0; left: 0; z-index: 3; }
svg.case-labels { position: sticky; top: 0; z-index: 2; border-bottom: 1px solid #d0d7de; }
svg.mutant-labels { position: sticky; left: 0; z-index: 2; border-right: 1px solid #d0d7de; }
svg text { font: 10.5px ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; fill: #1f2328; }
svg .stripe { fill: #f6f8fa; }
svg .column { fill: #fff; fill-opacity: 0; pointer-events: all; }
svg g:hover > .column { fill: #fff1a8; fill-opacity: .55; }
svg .gridline { stroke: #eaeef2; stroke-width: 1; }
.kill, i.kill { fill: #1a7f37; background: #1a7f37; }
.pass, i.pass { fill: #b7e4c2; background: #b7e4c2; }
.fault, i.fault { fill: #f0b070; background: #f0b070; }
svg .kills-bar { fill: #57606a; }
svg text.idle { fill: #cf222e; font-weight: 700; }
svg text.never { fill: #8c959f; }
ol.idle-cases { columns: 2; margin: 6px 0; }
p.caption { color: #57606a; margin: 0 0 8px; }
"""


def html_report(scoreds: list[Scored], *, root: Path = PROJECT_ROOT) -> str:
    """The whole page; mutant diffs are taken against the sources under ``root``."""
    body = ["<h1>kmut mutation report</h1>"]
    if not scoreds:
        body.append("<p>No scored runs.</p>")
    if len(scoreds) > 1:
        body.append(comparison_table(scoreds))
    body += [run_section(index, scored, root) for index, scored in enumerate(scoreds, 1)]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>kmut: {escape(', '.join(s.suite for s in scoreds)) or 'no runs'}</title>\n"
        f"<style>{outcome_css()}{CSS}</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )


def outcome_css() -> str:
    return "".join(f".o-{slug(outcome)} {{ --c: {colour}; }}\n" for outcome, colour in OUTCOME_COLOURS.items())


def slug(outcome: str) -> str:
    return outcome.replace(" ", "-")


def score_colour(score: float) -> str:
    return next(colour for floor, colour in SCORE_BANDS if score >= floor)


def throughput(scored: Scored) -> str:
    rate = scored.mutants_per_minute
    return f"{rate:.1f}" if rate else "—"


# -- comparison --

def comparison_table(scoreds: list[Scored]) -> str:
    rows = "".join(
        f"<tr><td><a href=\"#run-{index}\">{escape(scored.suite)}</a></td><td>{escape(scored.device)}</td>"
        f"<td>{escape(scored.mode)}</td><td>{escape(scored.mutant_set)}</td>"
        f"<td class=\"num\" style=\"color: {score_colour(scored.score)}\"><b>{scored.score_text}</b></td>"
        f"<td class=\"num\">{scored.counts[KILLED]}</td><td class=\"num\">{scored.scored_total}</td>"
        f"<td class=\"num\">{throughput(scored)}</td></tr>"
        for index, scored in enumerate(scoreds, 1)
    )
    return (
        "<table class=\"comparison\"><thead><tr><th>suite</th><th>device</th><th>mode</th><th>mutants</th>"
        "<th class=\"num\">score</th><th class=\"num\">killed</th><th class=\"num\">scored total</th>"
        f"<th class=\"num\">mutants/minute</th></tr></thead><tbody>{rows}</tbody></table>"
    )


# -- one run --

def run_section(index: int, scored: Scored, root: Path) -> str:
    anchor = f"run-{index}"
    return (
        f"<section class=\"run\" id=\"{anchor}\">\n{run_header(scored)}\n{survivors_section(scored, root)}\n"
        f"{kill_matrix_section(anchor, scored)}\n{classified_section(scored, root)}\n</section>"
    )


def run_header(scored: Scored) -> str:
    meta = (f"mode <b>{escape(scored.mode)}</b> · mutant set <b>{escape(scored.mutant_set)}</b> · "
            f"{len(scored.case_ids)} cases · {len(scored.rows)} mutants")
    not_run = scored.counts[NOT_RUN]
    warning = (f"<p class=\"notice\">{not_run} of {len(scored.rows)} mutants have not run yet:"
               " the score is provisional.</p>" if not_run else "")
    return (
        f"<h2>{escape(scored.suite)} on {escape(scored.device)}</h2>\n<p class=\"meta\">{meta}</p>\n"
        f"<div class=\"headline\">{score_box(scored)}<div class=\"facts\">{outcome_counts(scored)}"
        f"{outcome_bar(scored)}{run_facts(scored)}</div></div>{warning}"
    )


def score_box(scored: Scored) -> str:
    return (
        f"<div class=\"score\" style=\"background: {score_colour(scored.score)}\">"
        f"<div class=\"value\">{scored.score_text}</div>"
        f"<div class=\"of\">{scored.counts[KILLED]} killed of {scored.scored_total} scored</div>"
        "<div class=\"of\">scored: killed + survived + timeout + crashed</div></div>"
    )


def outcome_counts(scored: Scored) -> str:
    items = "".join(
        f"<li class=\"o-{slug(outcome)}{'' if scored.counts[outcome] else ' zero'}\">"
        f"<b>{scored.counts[outcome]}</b>{outcome}</li>"
        for outcome in (*OUTCOMES, NOT_RUN)
    )
    return f"<ul class=\"counts\">{items}</ul>"


def outcome_bar(scored: Scored) -> str:
    segments = "".join(
        f"<span class=\"o-{slug(outcome)}\" style=\"flex: {scored.counts[outcome]}\" "
        f"title=\"{outcome}: {scored.counts[outcome]}\"></span>"
        for outcome in (*OUTCOMES, NOT_RUN) if scored.counts[outcome]
    )
    return f"<div class=\"bar\">{segments}</div>"


def run_facts(scored: Scored) -> str:
    classified = sum(scored.counts[o] for o in CLASSIFIED)
    if scored.mutants_per_minute:
        speed = (f"<b>{scored.mutants_per_minute:.1f}</b> mutants/minute "
                 f"({scored.wall_seconds:.0f} s wall for the {scored.processed} mutants the run decided)")
    else:
        speed = "throughput not recorded"
    return (f"<div>{speed} · <b>{100 * scored.classified_share:.0f}%</b> classified without running a case "
            f"({classified} of {len(scored.rows)})</div>")


# -- mutants and their diffs --

def survivors_section(scored: Scored, root: Path) -> str:
    survivors = sorted(scored.survivors(), key=lambda row: OUTCOMES.index(row[1].outcome))
    if not survivors:
        return "<h3>Survivors</h3><p>Every mutant that ran was killed.</p>"
    cards = "\n".join(mutant_card(mutant, result, root) for mutant, result in survivors)
    return f"<h3>Survived, timed out or crashed ({len(survivors)})</h3>\n{cards}"


def mutant_card(mutant: Mutant, result: Result, root: Path) -> str:
    detail = f"<pre class=\"detail\">{escape(shortened(result.detail))}</pre>" if result.detail else ""
    return (
        f"<article class=\"mutant\"><header>{outcome_badge(result.outcome)} <code>{escape(mutant.id)}</code> — "
        f"{escape(mutant.description)}<span class=\"where mono\">{escape(mutant.path)}:{mutant.line} · "
        f"{result.seconds:.1f} s</span></header>{detail}{diff_block(mutant, root)}</article>"
    )


def outcome_badge(outcome: str) -> str:
    return f"<span class=\"badge o-{slug(outcome)}\">{escape(outcome)}</span>"


def shortened(text: str) -> str:
    if len(text) <= DETAIL_LIMIT:
        return text
    return f"{text[:DETAIL_LIMIT]}\n… ({len(text) - DETAIL_LIMIT} more characters)"


def diff_block(mutant: Mutant, root: Path) -> str:
    lines = mutant.diff(read_source(mutant.path, root)).splitlines()
    spans = "".join(f"<span class=\"{diff_line_kind(i, line)}\">{escape(line)}</span>" for i, line in enumerate(lines))
    return f"<pre class=\"diff\">{spans}</pre>"


def diff_line_kind(index: int, line: str) -> str:
    if (index < 2 and line.startswith(("--- ", "+++ "))) or line.startswith("\\"):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    return {"+": "add", "-": "del"}.get(line[:1], "context")


def classified_section(scored: Scored, root: Path) -> str:
    rows = [(m, r) for m, r in scored.rows if r and r.outcome in CLASSIFIED]
    if not rows:
        return "<h3>Classified without running</h3><p>No mutant was decided by its compiled code.</p>"
    body = "".join(
        f"<tr><td><code>{escape(mutant.id)}</code></td><td>{outcome_badge(result.outcome)}</td>"
        f"<td>{escape(mutant.description)}<details><summary>diff</summary>{diff_block(mutant, root)}</details></td>"
        f"<td class=\"decided\"><code>{escape(shortened(result.detail))}</code></td></tr>"
        for mutant, result in rows
    )
    return (
        f"<h3>Classified without running a case ({len(rows)})</h3>\n"
        "<p class=\"caption\">Decided from the compiled code: stillborn mutants do not compile, equivalent ones "
        "compile to the same code as the original, duplicates to the same code as another mutant. "
        "The last column names the artifact that decided each.</p>\n"
        "<table class=\"classified\"><thead><tr><th>mutant</th><th>outcome</th><th>description</th>"
        f"<th>decided by</th></tr></thead><tbody>{body}</tbody></table>"
    )


# -- the kill matrix --

@dataclass
class MatrixLayout:
    rows: list[tuple[Mutant, Result | None]]
    case_ids: list[str]
    case_labels: list[str]
    label_width: int
    header_height: int

    @property
    def grid_width(self) -> int:
        return CELL * len(self.case_ids)

    @property
    def grid_height(self) -> int:
        return CELL * len(self.rows)


def kill_matrix_section(anchor: str, scored: Scored) -> str:
    rows = [(m, r) for m, r in scored.rows if not (r and r.outcome in CLASSIFIED)]
    if not rows or not scored.case_ids:
        return f"<h3 id=\"{anchor}-matrix\">Kill matrix</h3><p>No mutant ran a case.</p>"
    labels, shared = case_labels(scored.case_ids)
    row_label_chars = min(LABEL_CHARS, max([len(m.id) for m, _ in rows] + [len(FOOTER_LABEL)]))
    layout = MatrixLayout(
        rows=rows,
        case_ids=scored.case_ids,
        case_labels=labels,
        label_width=round(CHAR_WIDTH * row_label_chars) + 22,  # and the outcome swatch
        header_height=round(CHAR_WIDTH * max(len(label) for label in labels)) + 10,
    )
    caption = ("Rows are the mutants that were not classified from their compiled code;"
               " hover a column for its full case id.")
    if shared:
        caption += f" Column labels leave out what most case ids share: <code>{escape(' '.join(shared))}</code>."
    return (
        f"<h3 id=\"{anchor}-matrix\">Kill matrix ({len(rows)} mutants × {len(scored.case_ids)} cases)</h3>\n"
        f"<p class=\"caption\">{caption}</p>\n{matrix_legend()}\n"
        "<div class=\"matrix-scroll\"><div class=\"matrix-grid\" "
        f"style=\"grid-template-columns: {layout.label_width}px {layout.grid_width}px\">"
        f"{corner_svg(layout)}{case_labels_svg(layout)}{mutant_labels_svg(layout)}{cells_svg(layout)}"
        f"{footer_label_svg(layout)}{kills_per_case_svg(layout)}</div></div>\n{idle_cases(scored)}"
    )


def case_labels(case_ids: list[str]) -> tuple[list[str], list[str]]:
    """Short column labels: each id without the ``-``-separated parts that most ids share
    (the base case of a suite), numbered and cut to ``LABEL_CHARS``; and the parts left out."""
    part_counts = Counter(part for case_id in case_ids for part in set(case_id.split("-")))
    shared = sorted(p for p, n in part_counts.items() if n > len(case_ids) / 2) if len(case_ids) > 2 else []
    labels = []
    for number, case_id in enumerate(case_ids, 1):
        kept = "-".join(p for p in case_id.split("-") if p not in shared) or "(shared parts only)"
        labels.append(clipped(f"{number} {kept}"))
    return labels, shared


def clipped(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


def matrix_legend() -> str:
    entries = (("kill", "this case killed the mutant"), ("pass", "ran and passed"),
               ("fault", "ran: error, timeout or no compile"), ("", "not run"))
    return "<div class=\"legend\">" + "".join(
        f"<span><i class=\"{kind}\"></i>{text}</span>" for kind, text in entries) + "</div>"


def svg(css_class: str, width: int, height: int, content: str) -> str:
    return (f"<svg class=\"{css_class}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" "
            f"viewBox=\"0 0 {width} {height}\">{content}</svg>")


def corner_svg(layout: MatrixLayout) -> str:
    text = f"<text x=\"6\" y=\"{layout.header_height - 6}\">mutant \\ case</text>"
    return svg("corner", layout.label_width, layout.header_height, text)


def case_labels_svg(layout: MatrixLayout) -> str:
    columns = "".join(
        f"<g><title>{escape(case_id)}</title>"
        f"<rect class=\"column\" x=\"{j * CELL}\" y=\"0\" width=\"{CELL}\" height=\"{layout.header_height}\"/>"
        f"<text transform=\"translate({j * CELL + CELL / 2 + 3.5},{layout.header_height - 5}) rotate(-90)\">"
        f"{escape(label)}</text></g>"
        for j, (case_id, label) in enumerate(zip(layout.case_ids, layout.case_labels))
    )
    return svg("case-labels", layout.grid_width, layout.header_height, columns)


def mutant_labels_svg(layout: MatrixLayout) -> str:
    rows = "".join(
        f"<g><title>{escape(mutant.id)}: {escape(outcome_of(result))} — {escape(mutant.description)}</title>"
        f"{stripe(i, layout.label_width)}"
        f"<text x=\"{layout.label_width - 14}\" y=\"{i * CELL + CELL - 2.5}\" text-anchor=\"end\">"
        f"{escape(clipped(mutant.id))}</text>"
        f"<rect class=\"o-{slug(outcome_of(result))}\" style=\"fill: var(--c)\" x=\"{layout.label_width - 10}\" "
        f"y=\"{i * CELL + 2}\" width=\"6\" height=\"{CELL - 4}\"/></g>"
        for i, (mutant, result) in enumerate(layout.rows)
    )
    return svg("mutant-labels", layout.label_width, layout.grid_height, rows)


def outcome_of(result: Result | None) -> str:
    return result.outcome if result else NOT_RUN


def stripe(row: int, width: int) -> str:
    return f"<rect class=\"stripe\" x=\"0\" y=\"{row * CELL}\" width=\"{width}\" height=\"{CELL}\"/>" if row % 2 else ""


def cells_svg(layout: MatrixLayout) -> str:
    stripes = "".join(stripe(i, layout.grid_width) for i in range(len(layout.rows)))
    gridlines = "".join(
        f"<line class=\"gridline\" x1=\"{j * CELL}\" y1=\"0\" x2=\"{j * CELL}\" y2=\"{layout.grid_height}\"/>"
        for j in range(5, len(layout.case_ids), 5)
    )
    columns = "".join(
        f"<g><title>{escape(case_id)}</title>"
        f"<rect class=\"column\" x=\"{j * CELL}\" y=\"0\" width=\"{CELL}\" height=\"{layout.grid_height}\"/>"
        f"{column_cells(j, case_id, layout.rows)}</g>"
        for j, case_id in enumerate(layout.case_ids)
    )
    return svg("cells", layout.grid_width, layout.grid_height, stripes + gridlines + columns)


def column_cells(column: int, case_id: str, rows: list[tuple[Mutant, Result | None]]) -> str:
    cells = []
    for i, (_, result) in enumerate(rows):
        state = cell_state(result, case_id)
        if state:
            cells.append(f"<rect class=\"{state}\" x=\"{column * CELL + 1}\" y=\"{i * CELL + 1}\" "
                         f"width=\"{CELL - 2}\" height=\"{CELL - 2}\"/>")
    return "".join(cells)


def cell_state(result: Result | None, case_id: str) -> str | None:
    """kill, pass, fault (ran: error, timeout, no compile) or None (not run)."""
    if result is None:
        return None
    if case_id in result.killed_by:
        return "kill"
    ran = result.case_results.get(case_id)
    if ran is None:
        return None
    return "pass" if ran == CaseResult.PASS else "fault"


def footer_label_svg(layout: MatrixLayout) -> str:
    text = f"<text x=\"{layout.label_width - 6}\" y=\"{FOOTER_HEIGHT - 6}\" text-anchor=\"end\">{FOOTER_LABEL}</text>"
    return svg("footer-label", layout.label_width, FOOTER_HEIGHT, text)


def kills_per_case_svg(layout: MatrixLayout) -> str:
    """A bar per column; a red × under a case that ran and killed nothing, a grey · under one never run."""
    kills = [sum(1 for _, r in layout.rows if r and case_id in r.killed_by) for case_id in layout.case_ids]
    tallest = max(kills) or 1
    marks = []
    for j, (case_id, count) in enumerate(zip(layout.case_ids, kills)):
        centre = j * CELL + CELL / 2
        if count:
            height = max(2, round((FOOTER_HEIGHT - 8) * count / tallest))
            marks.append(f"<rect class=\"kills-bar\" x=\"{j * CELL + 2}\" y=\"4\" width=\"{CELL - 4}\" "
                         f"height=\"{height}\"><title>{escape(case_id)}: {count} kills</title></rect>")
        elif any(r and case_id in r.case_results for _, r in layout.rows):
            marks.append(f"<text class=\"idle\" x=\"{centre}\" y=\"14\" text-anchor=\"middle\">×"
                         f"<title>{escape(case_id)}: ran, killed nothing</title></text>")
        else:
            marks.append(f"<text class=\"never\" x=\"{centre}\" y=\"14\" text-anchor=\"middle\">·"
                         f"<title>{escape(case_id)}: never ran</title></text>")
    return svg("kills-per-case", layout.grid_width, FOOTER_HEIGHT, "".join(marks))


def idle_cases(scored: Scored) -> str:
    kills = scored.matrix()
    ran = {case_id for _, r in scored.rows if r for case_id in r.case_results}
    idle = [(number, case_id) for number, case_id in enumerate(scored.case_ids, 1) if not kills.get(case_id)]
    if not idle:
        return "<p>Every case kills at least one mutant.</p>"
    items = "".join(
        f"<li value=\"{number}\"><code>{escape(case_id)}</code>{'' if case_id in ran else ' <i>(never ran)</i>'}</li>"
        for number, case_id in idle)
    caveat = ("<p class=\"caption\">In first-kill mode a mutant stops at its first failing case, so a case can"
              " kill nothing here and still catch mutants; run the full matrix to be sure.</p>"
              if scored.mode != "matrix" else "")
    return (f"<h3>Cases that kill nothing ({len(idle)} of {len(scored.case_ids)})</h3>"
            f"{caveat}<ol class=\"idle-cases\">{items}</ol>")
