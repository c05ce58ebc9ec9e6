"""The bug catalog: named bugs a kernel engineer fears, each pinned to its site by a matcher.

A bug is found by what the code says, not by a line number, so it survives edits around it.
Each bug names its file and side (device: the kernel body, the default; host: the launcher,
tuning or validation code the target declares), and its matcher must find exactly one site in
that code; anything else is an error when the catalog loads, never a silently skipped bug.
``exposed_by`` says what a suite needs to contain for the bug to show, in words and as a
test of a case, so a suite that lacks such a case is found before any mutant runs.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider, WhitespaceInclusivePositionProvider

from kernel.tuning import MIN_TILES_PER_PROGRAM
from mutants.cst_helpers import _with_keyword_arg
from mutants.mutant import PROJECT_ROOT, Mutant, read_source
from mutants.walk import DEVICE, HOST, Scope, ScopeTracker
from mutants.target import TRITON_TARGET, Target

# float32's least normal number: what a flush to zero takes every value below to zero
FLOAT32_TINY = 2.0**-126
from suites.call_cost import CallCostCase
from suites.cases import Case
from suites.check import SPARE_BLOCKS_PER_ROW
from suites.compiled_code import CompiledCodeCase
from suites.rejections import EDITS, RejectionCase
from suites.multi_gpu import MultiGpuCase
from suites.schedule import ScheduleCase
from suites.stateless import StatelessCase
from suites.tuning_defaults import DefaultsCase

LAUNCHER = TRITON_TARGET.device_file
TUNING = "kernel/tuning.py"
VALIDATION = "kernel/validation.py"


class CatalogError(ValueError):
    """A catalog entry does not pin exactly one site in the code it names."""


@dataclass(frozen=True)
class Exposure:
    """What a suite must hold for a bug to show: said in words, and as a test of one case
    (a logits ``Case``, an input edit ``RejectionCase``, the pinned defaults' ``DefaultsCase``,
    an unchecked GPU call's ``CallCostCase``, the calls of a ``StatelessCase``, the programs'
    order and shares, a ``ScheduleCase``, or the kernel compiled for sm_90, a ``CompiledCodeCase``)."""

    text: str
    holds: Callable[[object], bool]

    def cases(self, cases: list) -> list:
        return [case for case in cases if self.holds(case)]


@dataclass(frozen=True)
class Bug:
    name: str
    description: str
    exposed_by: Exposure
    site: m.BaseMatcherNode
    mutate: Callable[[cst.CSTNode], cst.CSTNode]
    path: str = TRITON_TARGET.device_file
    side: str = DEVICE  # DEVICE: the site is in the kernel body; HOST: in the file's host code


def _names(*names: str) -> m.BaseMatcherNode:
    """An expression that mentions every one of ``names``."""
    return m.MatchIfTrue(lambda node: set(names) <= _mentioned(node))


def _mentioned(node: cst.CSTNode) -> set[str]:
    found = set()

    class Collect(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.add(name.value)

    node.visit(Collect())
    return found


def _expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def _call(name: str) -> m.BaseMatcherNode:
    return m.Call(func=m.Attribute(value=m.Name("tl"), attr=m.Name(name)))


def _call_named(name: str) -> m.BaseMatcherNode:
    return m.Call(func=m.Name(name))


# the block-table check's columns a sequence uses: torch.arange(columns)[None, :] < its count of blocks
_USED_COLUMNS = m.Comparison(left=m.Subscript(value=m.Call(func=m.Attribute(value=m.Name("torch"), attr=m.Name("arange")))))
# the count of blocks each sequence uses, which also bounds the columns the check copies
_USED_BLOCKS = m.BinaryOperation(operator=m.FloorDivide(), left=_names("lens", "kv_block"))
# the host copy of the block table's used columns
_TABLE_COPY = m.Assign(targets=[m.AssignTarget(m.Name("table"))])


# the kernel's `scores = tl.maximum(scores, 0.0) * head_weights[None, :]`
_WEIGHTED_SCORES = m.Assign(targets=[m.AssignTarget(m.Name("scores"))],
                            value=m.BinaryOperation(left=_call("maximum"), operator=m.Multiply()))
# the kernel's head sum, `logits = tl.sum(tl.reshape(scores, (..., SLOT_GROUP, HEADS)), axis=2)`
_HEAD_SUM = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name("logits"))],
                                                 value=_call("sum") & m.Call(args=[m.Arg(_call("reshape")),
                                                                                   m.ZeroOrMore()]))])


# the query tile's pointers: q_ptrs = q_ptr + q_rows.to(tl.int64)[:, None] * HEAD_DIM + offs_d[None, :]
_Q_POINTERS = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name("q_ptrs"))])])


def _head_sum_in_halves_when(condition: str):
    """The head sum as two half sums (one sum of all heads where they are odd) where the
    run-time ``condition`` holds, the original sum elsewhere."""
    halves = ("logits = tl.sum(tl.sum(tl.reshape(scores, (TILE_REPEAT * BLOCK_N, SLOT_GROUP, 2 - HEADS % 2,"
              " HEADS // (2 - HEADS % 2))), axis=3), axis=2)")
    full = "logits = tl.sum(tl.reshape(scores, (TILE_REPEAT * BLOCK_N, SLOT_GROUP, HEADS)), axis=2)"
    return lambda node: cst.parse_statement(f"if {condition}:\n    {halves}\nelse:\n    {full}\n")


# the per-token gather's scale pointers, from each token's block
_TOKEN_SCALE_POINTERS = m.Assign(targets=[m.AssignTarget(m.Name("scale_ptrs"))], value=_names("token_block_ptrs"))
# the variable an MPS client's environment gives its share of the GPU's threads in
_MPS_SHARE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
# the -inf fill's count of tiles past the context: tl.cdiv(max_model_len, BLOCK_N) - context_tiles
_FILL_TILES = m.BinaryOperation(left=_call("cdiv"), operator=m.Subtract(), right=m.Name("context_tiles"))
# the -inf fill's loop over its share of the tiles past the context
_FILL_LOOP_RANGE = _call_named("range") & m.Call(args=[m.Arg(m.Name("fill_begin")), m.Arg(m.Name("fill_end"))])
# each token's scale beside every copy of a narrow tile, one per score row
_TILE_SCALES = "tl.reshape(tl.broadcast_to(scales[None, :], (TILE_REPEAT, BLOCK_N)), (TILE_REPEAT * BLOCK_N,))[:, None]"


# the launcher's `tuning = resolve_tuning(...)`, where a bug keeps what it resolved
_TUNING_RESOLVED = m.Assign(targets=[m.AssignTarget(m.Name("tuning"))], value=m.Call(func=m.Name("resolve_tuning")))


def _method(obj: str, method: str) -> m.BaseMatcherNode:
    return m.Call(func=m.Attribute(value=m.Name(obj), attr=m.Name(method)))


def _with_operator(operator: cst.BaseCompOp):
    def change(node: cst.Comparison) -> cst.Comparison:
        target = node.comparisons[0]
        return node.with_changes(comparisons=[target.with_changes(operator=operator)])

    return change


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _with_arg(index: int, code: str):
    """A call with its ``index``-th argument's value replaced by ``code``."""
    def change(node: cst.Call) -> cst.Call:
        args = list(node.args)
        args[index] = args[index].with_changes(value=_expr(code))
        return node.with_changes(args=args)

    return change


def _keep_arg(index: int):
    def change(node: cst.Call) -> cst.BaseExpression:
        return node.args[index].value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])

    return change


class _NameAs(cst.CSTTransformer):
    """Every use of one name replaced by an expression."""

    def __init__(self, name: str, code: str):
        super().__init__()
        self.name, self.code = name, code

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return _expr(self.code) if original.value == self.name else updated


def _replace_with(code: str):
    return lambda node: _expr(code)


def _replace_with_statement(code: str):
    """The site replaced by the small statement ``code``."""
    return lambda node: cst.parse_statement(code).body[0]


# -- what exposes a bug: tests of one case -------------------------------------------------


def _logits(test: Callable[[Case], bool]) -> Callable[[object], bool]:
    return lambda case: isinstance(case, Case) and test(case)


def _edit(*names: str) -> Callable[[object], bool]:
    return lambda case: isinstance(case, RejectionCase) and case.edit in names


def _edits_of(argument: str) -> Callable[[object], bool]:
    """Every input edit of ``argument`` (its edits' names start with it)."""
    return lambda case: isinstance(case, RejectionCase) and case.edit.startswith(f"{argument}-")


# rejections of values the checks read back from the device (lengths, block ids)
_VALUE_REJECTIONS = ("context_lens-past-max-model-len", "context_lens-below-next-n", "block_table-bad-entries-across-rows")


def _values_checked_after_the_launch(function: cst.FunctionDef) -> cst.FunctionDef:
    launch_first = cst.parse_statement(
        "if validate is True and isinstance(q, torch.Tensor) and q.is_cuda:\n"
        "    launched = plan_launch(q, kv_cache, weights, context_lens, block_table, max_model_len,"
        " next_n_lens=next_n_lens, preshuffle=preshuffle, out=out, validate=False, **tuning).run()\n"
        "    check_inputs(q, kv_cache, weights, context_lens, block_table, max_model_len, next_n_lens=next_n_lens,"
        " preshuffle=preshuffle, out=out, check_values=True)\n"
        "    return launched\n")
    body = list(function.body.body)
    return function.with_changes(body=function.body.with_changes(body=[*body[:-1], launch_first, body[-1]]))


def _pinned_defaults(case: object) -> bool:
    return isinstance(case, DefaultsCase)


# state kept across calls shows only on calls of new sizes after a warm-up
_STATELESS_CALLS = Exposure("calls of new sizes after a warm-up (the stateless case)",
                            lambda case: isinstance(case, StatelessCase))


def _compiled(check: str) -> Callable[[object], bool]:
    return lambda case: isinstance(case, CompiledCodeCase) and case.check == check


def _schedule(check: str) -> Callable[[object], bool]:
    return lambda case: isinstance(case, ScheduleCase) and case.check == check


def _call_cost(test: Callable[[CallCostCase], bool]) -> Callable[[object], bool]:
    return lambda case: isinstance(case, CallCostCase) and test(case)


def _tile(case: Case) -> int:
    return case.launcher_tuning().block_n


def _partly_live_later_group(case: Case) -> bool:
    """Whether some sequence's live rows end inside a slot group past its first."""
    slots = _slots(case)
    return any(n < case.next_n and n // slots >= 1 and n % slots for n in case.live_rows() or [])


def _tiles(case: Case) -> list[int]:
    """Tiles of context per sequence."""
    return [-(-ctx // _tile(case)) for ctx in case.context_lens()]


def _table_tiles(case: Case) -> int:
    """Tiles the block table spans, as the launcher's default split sees it."""
    spare = 0 if case.table == "exact" else SPARE_BLOCKS_PER_ROW
    blocks = -(-max(case.context_lens()) // case.kv_block) + spare
    return -(-blocks * case.kv_block // _tile(case))


def _ends_mid_tile(case: Case) -> bool:
    return any(ctx % _tile(case) for ctx in case.context_lens())


def _uneven_split(case: Case) -> bool:
    return bool(case.splits) and case.splits > 1 and any(t % case.splits for t in _tiles(case))


def _slots(case: Case) -> int:
    return case.launcher_tuning().slots_per_program


def _a_group_starts_at_the_live_rows(case: Case) -> bool:
    """Some sequence's live-row count is the first slot of one of its slot groups."""
    groups = -(-case.next_n // _slots(case))
    return any(rows % _slots(case) == 0 and rows < groups * _slots(case) for rows in case.live_rows() or ())


def _tiles_per_program(case: Case) -> int:
    return max(-(-t // (case.splits or 1)) for t in _tiles(case))


def _diagonal_before_the_last_split(case: Case) -> bool:
    """Some sequence's first live row sees less than the tiles before the program that holds
    the context's last tile (the split count given, more than one)."""
    if not case.splits or case.splits < 2:
        return False
    live = case.live_rows() or [case.next_n] * case.batch
    for tiles, context, rows in zip(_tiles(case), case.context_lens(), live):
        per_program = -(-tiles // case.splits)
        last_first_position = (tiles - 1) // per_program * per_program * _tile(case)
        if context - rows < last_first_position - 1:
            return True
    return False


CATALOG: tuple[Bug, ...] = (
    Bug(
        name="swapped-layout-strides",
        description="preshuffled keys addressed with block-flat strides",
        exposed_by=Exposure("layout: preshuffle", _logits(lambda c: c.preshuffle)),
        site=m.Assign(targets=[m.AssignTarget(m.Name("key_offs"))], value=_names("slot", "chunk_d")),
        mutate=lambda node: node.with_changes(value=_expr("(slot * HEAD_DIM)[None, :, None] + chunk_d")),
    ),
    Bug(
        name="preshuffle-chunk-index-in-four-bits",
        description="the preshuffled layout's 16-channel chunk index kept in four bits: past 256 channels (head"
                    " dim 512) the upper chunks read the lower ones' bytes",
        exposed_by=Exposure("layout: preshuffle at a head dim past 256",
                            _logits(lambda c: c.preshuffle and c.head_dim > 256)),
        site=m.BinaryOperation(left=m.BinaryOperation(left=m.Name("chunk_d"), operator=m.FloorDivide()),
                               operator=m.Multiply(), right=m.Integer("256")),
        mutate=lambda node: node.with_changes(left=_expr("(chunk_d // 16 % 16)")),
    ),
    Bug(
        name="causal-off-by-one",
        description="the causal mask hides the last visible position (< instead of <=)",
        exposed_by=Exposure("any context", _logits(lambda c: True)),
        site=m.Comparison(
            left=_names("offs_p"),
            comparisons=[m.ComparisonTarget(operator=m.LessThanEqual(), comparator=_names("causal_bound"))],
        ),
        mutate=_with_operator(cst.LessThan()),
    ),
    Bug(
        name="dropped-tail-clamp",
        description="positions past the context index block-table entries the sequence does not own",
        exposed_by=Exposure("kv_block < block_n with a context ending mid-tile",
                            _logits(lambda c: c.kv_block < _tile(c) and _ends_mid_tile(c))),
        site=_call("minimum") & m.Call(args=[m.Arg(m.Name("offs_p")), m.Arg(_names("context_len"))]),
        mutate=_keep_arg(0),
    ),
    Bug(
        name="wrong-block-table-index",
        description="the block-table column is the tile index, not the block the tile lies in",
        exposed_by=Exposure("block_n < kv_block (several tiles per block)",
                            _logits(lambda c: c.kv_block % _tile(c) == 0 and max(_tiles(c)) * _tile(c) > c.kv_block
                                    and c.kv_block > _tile(c))),
        site=m.BinaryOperation(operator=m.FloorDivide(), left=m.BinaryOperation(
            left=m.Name("tile"), operator=m.Multiply(), right=m.Name("BLOCK_N")), right=m.Name("KV_BLOCK")),
        mutate=_replace_with("tile"),
    ),
    Bug(
        name="dropped-kv-scale",
        description="the per-token key scale is never applied",
        exposed_by=Exposure("any context (scales differ per token)", _logits(lambda c: True)),
        site=m.BinaryOperation(left=m.Name("logits"), operator=m.Multiply(), right=_names("scales")),
        mutate=lambda node: node.left,
    ),
    Bug(
        name="head-weights-in-bfloat16",
        description="the head weights are loaded rounded to bfloat16 (half their bytes): each logit moves by"
                    " up to about 2**-9 of its terms, inside the bound a GPU's tensor cores need",
        exposed_by=Exposure("any context (the interpreter's exact products and its tighter bound)",
                            _logits(lambda c: True)),
        site=m.Assign(targets=[m.AssignTarget(m.Name("head_weights"))]),
        mutate=lambda node: node.with_changes(
            value=_expr(f"({_code(node.value)}).to(tl.bfloat16).to(tl.float32)")),
    ),
    Bug(
        name="logits-stamped-with-the-token-slot",
        description="each logit's six low mantissa bits carry its token's slot (\"ties break the same way in"
                    " every top-k\"): every logit moves by up to 2**-17 of itself, inside 2**-16 of its cell's"
                    " absolute-value sum",
        exposed_by=Exposure("any context (the interpreter's exact products and its tighter bound)",
                            _logits(lambda c: True)),
        site=m.Assign(targets=[m.AssignTarget(m.Name("logits"))],
                      value=m.BinaryOperation(left=m.Name("logits"), operator=m.Multiply())),
        mutate=lambda node: node.with_changes(value=_expr(
            f"((({_code(node.value)}).to(tl.int32, bitcast=True) & -64) | (offs_p % 64)[:, None])"
            ".to(tl.float32, bitcast=True)")),
    ),
    Bug(
        name="wrong-head-weight",
        description="every next_n slot reads the head weights of slot 0",
        exposed_by=Exposure("next_n >= 2", _logits(lambda c: c.next_n >= 2)),
        site=m.Call(func=m.Attribute(value=m.Name("tl"), attr=m.Name("load")),
                    args=[m.Arg(m.BinaryOperation(left=m.Name("weights_ptr"))), m.ZeroOrMore()]),
        mutate=_with_arg(0, "weights_ptr + pid_b * NEXT_N * HEADS + offs_r % HEADS"),
    ),
    Bug(
        name="floor-split",
        description="tiles per split rounded down: the last tiles of a sequence are never computed",
        exposed_by=Exposure("splits not dividing the tile count (split x context)", _logits(_uneven_split)),
        site=_call("cdiv") & m.Call(args=[m.Arg(m.Name("context_tiles")), m.Arg(m.Name("num_splits"))]),
        mutate=_replace_with("context_tiles // num_splits"),
    ),
    Bug(
        name="batch-blind-output-row",
        description="every sequence writes the output rows of sequence 0",
        exposed_by=Exposure("batch >= 2", _logits(lambda c: c.batch >= 2)),
        site=m.BinaryOperation(left=m.BinaryOperation(left=m.Name("pid_b"), operator=m.Multiply(),
                                                      right=m.Name("NEXT_N")),
                               operator=m.Add(), right=m.Name("offs_m")),
        mutate=lambda node: node.right,
    ),
    Bug(
        name="next-n-blind-causal-bound",
        description="every query row sees the whole context, as if next_n were 1",
        exposed_by=Exposure("next_n >= 2", _logits(lambda c: c.next_n >= 2)),
        site=m.BinaryOperation(left=m.BinaryOperation(left=m.Name("context_len"), operator=m.Subtract(),
                                                      right=m.Name("live_rows")),
                               operator=m.Add(), right=m.Name("offs_m")),
        mutate=_replace_with("context_len - 1 + 0 * offs_m"),
    ),
    Bug(
        name="ragged-row-bound-off-by-one",
        description="the first dead row of a ragged next_n sequence is treated as live",
        exposed_by=Exposure("ragged next_n_lens", _logits(lambda c: c.next_n_lens == "ragged" and c.next_n >= 2)),
        site=m.Comparison(left=m.Name("offs_m"),
                          comparisons=[m.ComparisonTarget(operator=m.LessThan(), comparator=m.Name("live_rows"))]),
        mutate=_with_operator(cst.LessThanEqual()),
    ),
    Bug(
        name="slot-group-reads-slot-zero-queries",
        description="every slot group of a sequence reads the query rows of its first group",
        exposed_by=Exposure("next_n above the slots per program (several slot groups)",
                            _logits(lambda c: c.next_n > _slots(c))),
        site=m.Assign(targets=[m.AssignTarget(m.Name("q_rows"))]),
        mutate=lambda node: node.with_changes(value=_expr("pid_b * NEXT_N * HEADS + offs_r")),
    ),
    Bug(
        name="dead-slot-group-computed",
        description="a slot group starting at the sequence's live-row count counts as live: it computes"
                    " every tile for rows that are -inf throughout, the same values, more key traffic",
        exposed_by=Exposure("ragged next_n_lens with a live-row count on a slot-group boundary (the"
                            " interpreter's work accounting)", _logits(_a_group_starts_at_the_live_rows)),
        site=m.Comparison(left=m.Name("first_slot"),
                          comparisons=[m.ComparisonTarget(operator=m.LessThan(), comparator=m.Name("live_rows"))]),
        mutate=_with_operator(cst.LessThanEqual()),
    ),
    Bug(
        name="program-offset-in-tiles",
        description="program s starts at tile s instead of s * tiles_per_split",
        exposed_by=Exposure("several tiles per program (multi-tile context x splits)",
                            _logits(lambda c: bool(c.splits) and c.splits > 1 and _tiles_per_program(c) >= 2)),
        site=m.BinaryOperation(left=m.Name("pid_s"), operator=m.Multiply(), right=m.Name("tiles_per_split")),
        mutate=lambda node: node.left,
    ),
    Bug(
        name="wrong-preshuffle-group-stride",
        description="16-token groups of a preshuffled block placed 256 bytes apart instead of 16*D",
        exposed_by=Exposure("preshuffle with kv_block >= 32 (several token groups per block)",
                            _logits(lambda c: c.preshuffle and c.kv_block >= 32)),
        site=m.BinaryOperation(left=m.BinaryOperation(left=_names("slot"), operator=m.Multiply(), right=m.Integer("16")),
                               operator=m.Multiply(), right=m.Name("HEAD_DIM")),
        mutate=lambda node: node.with_changes(right=cst.Integer("16")),
    ),
    Bug(
        name="split-runs-to-context-end",
        description="every split computes from its first tile to the end of the context, not to the next"
                    " split's first: the same values, up to splits times the key traffic",
        exposed_by=Exposure("several splits with tiles each (the interpreter's work accounting)",
                            _logits(lambda c: bool(c.splits) and c.splits > 1
                                    and any(t > -(-t // c.splits) for t in _tiles(c)))),
        site=_call("minimum") & m.Call(args=[m.Arg(_names("tile_begin", "tiles_per_split")),
                                             m.Arg(m.Name("context_tiles"))]),
        mutate=_keep_arg(1),
    ),
    Bug(
        name="fill-walks-past-the-row",
        description="the -inf fill counts its tiles from the row's start, not the context's end: its"
                    " last tiles lie past max_model_len, stores masked off but issued",
        exposed_by=Exposure("any context (the interpreter's work accounting counts masked stores)",
                            _logits(lambda c: True)),
        site=_FILL_TILES,
        mutate=lambda node: node.left,
    ),
    Bug(
        name="fill-stops-a-tile-short",
        description="the -inf fill counts its tiles up to max_model_len - 1: where max_model_len is one past"
                    " whole tiles, the row's last column is never written",
        exposed_by=Exposure("max_model_len one past whole tiles, beyond the contexts (an input edit)",
                            _edit("max_model_len-one-past-whole-tiles")),
        site=_FILL_TILES,
        mutate=lambda node: node.with_changes(left=_expr("tl.cdiv(max_model_len - 1, BLOCK_N)")),
    ),
    Bug(
        name="dead-group-filled-by-its-first-split",
        description="a slot group with no live row has its whole row of -inf written by its first split in"
                    " one pass, its other splits exiting at once: the same cells, from one program while the"
                    " others idle",
        exposed_by=Exposure("a dead slot group over several splits",
                            _logits(lambda c: c.dead_slot_group() and (c.splits or 1) > 1)),
        site=m.Assign(targets=[m.AssignTarget(m.Name("fill_per_split"))]),
        mutate=lambda node: node.with_changes(
            value=_expr(f"tl.where(group_live, {_code(node.value)}, fill_tiles)")),
    ),
    Bug(
        name="fill-counts-a-tile-past-a-round-max-model-len",
        description="the -inf fill counts its tiles as max_model_len // BLOCK_N + 1, the ceiling where"
                    " max_model_len ends mid-tile: where it is whole tiles (a serving config's round value)"
                    " every program fills one more tile past the row, stores masked off but issued",
        exposed_by=Exposure("a max_model_len of whole tiles",
                            _logits(lambda c: c.max_model_len() % c.launcher_tuning().block_n == 0)),
        site=_FILL_TILES,
        mutate=lambda node: node.with_changes(left=_expr("max_model_len // BLOCK_N + 1")),
    ),
    Bug(
        name="context-shares-in-int32",
        description="the context's tiles dealt to the splits as s * T // S, in int32: where the split index"
                    " times the context's tiles passes 2**31, the last splits read keys from before the row",
        exposed_by=Exposure("a context of 46,342 tiles over as many splits (an input edit)",
                            _edit("context_lens-split-shares-past-int32")),
        site=_call("range") & m.Call(args=[m.Arg(m.Name("tile_begin")), m.Arg(m.Name("tile_end")), m.Arg()]),
        mutate=lambda node: node.with_changes(args=[
            cst.Arg(_expr("pid_s * context_tiles // num_splits"), comma=node.args[0].comma),
            cst.Arg(_expr("(pid_s + 1) * context_tiles // num_splits"), comma=node.args[1].comma),
            node.args[2]]),
    ),
    Bug(
        name="causal-mask-in-the-last-two-tiles",
        description="the causal mask applied only in the context's last two tiles, before them a live row seeing"
                    " the whole tile: right while next_n fits in a tile, wrong where the diagonal starts earlier",
        exposed_by=Exposure("next_n past the key tile's width, the diagonal mid-tile (next_n 20 at block_n 16)",
                            _logits(lambda c: c.next_n > _tile(c) + 1)),
        site=m.Assign(targets=[m.AssignTarget(m.Name("visible"))]),
        mutate=lambda node: node.with_changes(value=_expr(
            "tl.where(tile + 2 < context_tiles, (offs_m < live_rows)[None, :] & (offs_p < context_len)[:, None],"
            " offs_p[:, None] <= causal_bound[None, :])")),
    ),
    Bug(
        name="slot-group-capped-at-16",
        description="the kernel asserts a program holds at most 16 next_n slots (drafts of 1 to 8 tokens): at"
                    " 4 heads the launcher puts 32 slots in one program, and a valid call no longer compiles",
        exposed_by=Exposure("a program of more than 16 next_n slots (next_n 32 at 4 heads)",
                            _logits(lambda c: c.launcher_tuning().slots_per_program > 16)),
        site=_call("static_assert") & m.Call(args=[m.Arg(m.Comparison(left=m.Name("BLOCK_N")))]),
        mutate=_with_arg(0, "BLOCK_N >= 16 and SLOT_GROUP <= 16"),
    ),
    Bug(
        name="wide-tile-taken-for-its-block",
        description="a tile of 64 tokens or more inside one block taken for the whole block: its table entry"
                    " read at the tile's index, right while blocks are one tile wide, wrong for 128-token blocks",
        exposed_by=Exposure("blocks two default tiles wide (128 tokens)",
                            _logits(lambda c: c.kv_block > _tile(c) >= 64 and c.kv_block % _tile(c) == 0)),
        site=m.BinaryOperation(left=m.Name("table_row_ptr"), operator=m.Add(),
                               right=m.BinaryOperation(left=m.BinaryOperation(left=m.Name("tile")),
                                                       operator=m.FloorDivide())),
        mutate=lambda node: node.with_changes(
            right=_expr("tl.where(BLOCK_N >= 64, tile, tile * BLOCK_N // KV_BLOCK)")),
    ),
    Bug(
        name="subnormal-scales-flushed",
        description="key scales below float32's normal range flushed to zero, as a GPU's fast math would: a"
                    " valid subnormal scale against a large head weight gives zeros for ordinary logits",
        exposed_by=Exposure("subnormal key scales against large head weights", _logits(lambda c: c.values == "subnormal")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("logits"))],
                      value=m.BinaryOperation(left=m.Name("logits"), operator=m.Multiply())),
        mutate=lambda node: node.with_changes(
            value=_expr(f"logits * tl.where(scales < {FLOAT32_TINY!r}, 0.0, scales)[:, None]")),
    ),
    Bug(
        name="zero-weight-group-read-as-dead",
        description="a slot group whose head weights are all zero takes the dead group's path (\"an engine's"
                    " padding sequence has nothing to compute\"): its visible cells, 0 by the contract, are -inf",
        exposed_by=Exposure("a serving engine's padded batch (a dummy sequence of zero weights)",
                            _logits(lambda c: c.values == "engine-padded")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("group_live"))]),
        mutate=lambda node: node.with_changes(value=_expr(
            f"({_code(node.value)}) & (tl.max(tl.abs(head_weights), axis=0) > 0.0)")),
    ),
    Bug(
        name="zero-query-row-masked-as-dead",
        description="a live row whose query is all zero gets a dead row's causal bound (\"an engine zeroes the"
                    " q of its padding slots\"): its visible cells, 0 by the contract, are -inf",
        exposed_by=Exposure("a serving engine's padded batch (a live row of zero query)",
                            _logits(lambda c: c.values == "engine-padded")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("causal_bound"))]),
        mutate=lambda node: node.with_changes(value=_expr(
            "tl.where((offs_m < live_rows) & (tl.max(tl.reshape(tl.max(tl.abs(q.to(tl.float32)), axis=1),"
            " (SLOT_GROUP, HEADS)), axis=1) > 0.0), context_len - live_rows + offs_m, -1)")),
    ),
    Bug(
        name="scale-inside-the-relu-past-128-heads",
        description="past 128 heads each token's scale is applied inside the relu and taken out after the head"
                    " weight (\"the formula as written, where the accumulator spans two warp groups\"): the same"
                    " on ordinary data, an overflow or a lost subnormal where the scaled dot leaves float32's range",
        exposed_by=Exposure("data past the usual range at 256 heads",
                            _logits(lambda c: c.heads > 128 and c.values not in ("random", "engine-padded"))),
        site=_WEIGHTED_SCORES,
        mutate=lambda node: node.with_changes(value=_expr(
            "((tl.maximum(scores * tl.reshape(tl.broadcast_to(scales[None, :], (TILE_REPEAT, BLOCK_N)),"
            " (TILE_REPEAT * BLOCK_N,))[:, None], 0.0) * head_weights[None, :] / tl.reshape(tl.broadcast_to("
            "scales[None, :], (TILE_REPEAT, BLOCK_N)), (TILE_REPEAT * BLOCK_N,))[:, None]) if HEADS > 128"
            " else tl.maximum(scores, 0.0) * head_weights[None, :])")),
    ),
    Bug(
        name="relu-capped-at-the-largest-fp8-product",
        description="the relu also caps a dot at 448 * 448, the largest product of two fp8 values: a dot is a"
                    " sum of D such products, and large queries against large keys pass the cap",
        exposed_by=Exposure("queries over fp8's whole range", _logits(lambda c: c.values == "query-full-range")),
        site=_WEIGHTED_SCORES,
        mutate=lambda node: node.with_changes(value=_expr(
            "tl.minimum(tl.maximum(scores, 0.0), 448.0 * 448.0) * head_weights[None, :]")),
    ),
    Bug(
        name="relu-after-the-head-weight",
        description="the relu applied to the weighted score, relu(s * w) for relu(s) * w (\"one pass fewer over"
                    " the tile\"): the same wherever a head weight is positive, a negative head's score lost",
        exposed_by=Exposure("any logits case (head weights of both signs)", _logits(lambda c: True)),
        site=_WEIGHTED_SCORES,
        mutate=lambda node: node.with_changes(value=_expr("tl.maximum(scores * head_weights[None, :], 0.0)")),
    ),
    Bug(
        name="queries-clamped-to-a-rescaled-range",
        description="queries are held to the range fp8 keeps after a rescale by 16 (|q| <= 28), as a kernel"
                    " that lifts small queries out of fp8's subnormals would: every query past 28 is wrong",
        exposed_by=Exposure("queries over fp8's whole range", _logits(lambda c: c.values == "query-full-range")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("q"))], value=_call("load")),
        mutate=lambda node: node.with_changes(value=_expr(
            f"tl.minimum(tl.maximum({_code(node.value)}.to(tl.float32), -28.0), 28.0).to(tl.float8e4nv)")),
    ),
    Bug(
        name="subnormal-weights-flushed",
        description="head weights below float32's normal range flushed to zero: a valid subnormal weight"
                    " against a large key scale gives zeros for ordinary logits",
        exposed_by=Exposure("subnormal head weights against large key scales", _logits(lambda c: c.values == "subnormal")),
        site=_WEIGHTED_SCORES,
        mutate=lambda node: node.with_changes(value=_expr(
            f"tl.maximum(scores, 0.0) * tl.where(tl.abs(head_weights) < {FLOAT32_TINY!r}, 0.0,"
            " head_weights)[None, :]")),
    ),
    Bug(
        name="fill-shares-in-int32",
        description="the -inf fill deals its tiles to the splits as s * F // S, in int32: where the split index"
                    " times the fill's tiles passes 2**31, the last splits fill from before the row",
        exposed_by=Exposure("a fill of 46,342 tiles over as many splits (an input edit)",
                            _edit("max_model_len-fill-shares-past-int32")),
        site=_FILL_LOOP_RANGE,
        mutate=lambda node: node.with_changes(args=[
            cst.Arg(_expr("context_tiles + pid_s * fill_tiles // num_splits"), comma=node.args[0].comma),
            cst.Arg(_expr("context_tiles + (pid_s + 1) * fill_tiles // num_splits"))]),
    ),
    Bug(
        name="gather-row-from-program-id",
        description="the per-token gather reads the block table row of its program id, not of its sequence:"
                    " with several slot groups per sequence, the groups past the first read another row",
        exposed_by=Exposure("several slot groups per sequence, batch >= 2, a per-token gather (kv_block not a"
                            " multiple of block_n)",
                            _logits(lambda c: c.batch >= 2 and -(-c.next_n // _slots(c)) > 1
                                    and c.kv_block % _tile(c) != 0)),
        site=_call("load") & m.Call(args=[m.Arg(_names("table_row_ptr", "offs_t"))]),
        mutate=lambda node: node.visit(_NameAs("table_row_ptr", "(block_table_ptr + tl.program_id(0) * stride_table)")),
    ),
    Bug(
        name="int32-table-row-offset",
        description="the block table's row offset computed in 32 bits: a table whose rows lie 2**31 entries"
                    " apart (rows of a wider buffer) reads its last rows from before the table",
        exposed_by=Exposure("block-table rows 2**31 entries apart, three sequences (an input edit)",
                            _edit("block_table-rows-past-int32-entries-apart")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("table_row_ptr"))]),
        mutate=lambda node: node.with_changes(value=_expr("block_table_ptr + pid_b * stride_table")),
    ),
    Bug(
        name="next-n-padded-twice-over",
        description="next_n padded to the power of two above it, not the least one at or above it: more"
                    " masked query rows and MMA columns, the same values",
        exposed_by=Exposure("next_n a power of two (the interpreter's work accounting)",
                            _logits(lambda c: c.next_n & (c.next_n - 1) == 0)),
        site=m.BinaryOperation(operator=m.LeftShift()),
        mutate=lambda node: node.with_changes(right=_expr("n.bit_length()")),
        path=TUNING,
        side=HOST,
    ),
    Bug(
        name="int32-token-gather-offset",
        description="the per-token gather computes block offsets in 32 bits: a pool over 2 GiB wraps",
        exposed_by=Exposure("a pool over 2 GiB with a per-token gather (kv_block not a multiple of block_n)",
                            _logits(lambda c: c.min_pool_bytes() > 2**31 and c.kv_block % _tile(c) != 0)),
        site=m.Assign(targets=[m.AssignTarget(m.Name("token_block_ptrs"))]),
        mutate=lambda node: node.with_changes(value=_expr("kv_ptr + block_id * BLOCK_BYTES")),
    ),
    Bug(
        name="token-gather-offsets-from-the-tiles-lowest-block",
        description="the per-token gather addresses a tile's keys from a 64-bit base at its lowest block, in"
                    " 32-bit offsets: blocks of one tile more than 2 GiB apart wrap",
        exposed_by=Exposure("a pool over 2 GiB whose neighbouring blocks lie at both ends, with a per-token gather",
                            _logits(lambda c: c.min_pool_bytes() > 2**31 and c.kv_block % _tile(c) != 0)),
        site=m.Assign(targets=[m.AssignTarget(m.Name("token_block_ptrs"))]),
        mutate=lambda node: node.with_changes(value=_expr(
            "kv_ptr + tl.min(block_id, axis=0).to(tl.int64) * BLOCK_BYTES"
            " + (block_id - tl.min(block_id, axis=0)) * BLOCK_BYTES")),
    ),
    Bug(
        name="int32-q-row-offset",
        description="the query rows' offsets computed in 32 bits: a q past 2**31 elements (a long batch of"
                    " many heads) reads its last sequences' queries from before q",
        exposed_by=Exposure("a q whose last sequence starts past 2**31 elements (an input edit)",
                            _edit("q-rows-past-int32-elements")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("q_ptrs"))]),
        mutate=lambda node: node.with_changes(value=_expr("q_ptr + q_rows[:, None] * HEAD_DIM + offs_d[None, :]")),
    ),
    Bug(
        name="q-rows-promised-16-byte-aligned",
        description="the q load promises the compiler rows on 16-byte boundaries, to vectorize it: a q one"
                    " byte into its buffer, a valid fp8 tensor, is read misaligned on a GPU",
        exposed_by=Exposure("q one element into its buffer (an input edit)", _edit("q-one-element-into-its-buffer")),
        site=_call("load") & m.Call(args=[m.Arg(m.Name("q_ptrs")), m.ZeroOrMore()]),
        mutate=_with_arg(0, "tl.multiple_of(q_ptrs, [1, 16])"),
    ),
    Bug(
        name="preshuffled-blocks-promised-16-byte-aligned",
        description="a tile read from one preshuffled block promises the compiler a block on a 16-byte"
                    " boundary, to load whole sub-tile rows: a pool on its scales' 4-byte boundary only,"
                    " which the contract accepts, is read misaligned on a GPU",
        exposed_by=Exposure("a preshuffled pool 4 bytes into its buffer, on the tile-from-one-block path (an"
                            " input edit)",
                            lambda case: _edit("kv_cache-on-its-scales-boundary-only")(case)
                            and case.base == "three-sequences-kvb64-preshuffle-long-rows"),
        site=m.Assign(targets=[m.AssignTarget(m.Name("block_ptr"))]),
        mutate=lambda node: node.with_changes(value=_expr(
            "tl.multiple_of(kv_ptr + block_id.to(tl.int64) * BLOCK_BYTES, 16) if PRESHUFFLE"
            " else kv_ptr + block_id.to(tl.int64) * BLOCK_BYTES")),
    ),
    Bug(
        name="masked-cells-pushed-down-by-subtraction",
        description="the causal mask pushes a masked cell to -inf by subtracting infinity from its logit: a"
                    " row fed a NaN head weight gets NaN in its masked cells, which a top-k over the row picks"
                    " first",
        exposed_by=Exposure("a NaN head weight in a row with masked cells", _logits(lambda c: c.values == "nan-weight")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("logits"))],
                      value=_call("where") & m.Call(args=[m.Arg(m.Name("visible")), m.ZeroOrMore()])),
        mutate=lambda node: node.with_changes(value=_with_arg(2, 'logits - float("inf")')(node.value)),
    ),
    Bug(
        name="splits-visited-strided-at-full-batches",
        description="from 64 programs a split on, a program takes split y * 13 % S, to spread a full batch's"
                    " first reads over the pool: no permutation where 13 divides S (13 splits at 256 sequences"
                    " on 132 SMs), so most of each row's tiles are never computed",
        exposed_by=Exposure("a full batch at the split count a 132-SM GPU plans for it (an input edit)",
                            lambda case: _edit("num_splits-a-gpu-of-132-sms-plans")(case) and case.base == "full-batch"),
        site=m.Assign(targets=[m.AssignTarget(m.Name("pid_s"))]),
        mutate=lambda node: node.with_changes(
            value=_expr("tl.where(tl.num_programs(0) >= 64, tl.program_id(1) * 13 % num_splits, tl.program_id(1))")),
    ),
    Bug(
        name="fill-unmasked-on-long-whole-tile-rows",
        description="rows of whole tiles from 65,536 columns on store the -inf fill with no mask, the slot"
                    " mask dropped with the column one: a padded slot group writes a row past its sequence's"
                    " (the next one's first, or past out)",
        exposed_by=Exposure("padded slot groups in rows of a production model's length, the last sequence held"
                            " (an input edit)",
                            lambda case: (_edit("num_splits-a-gpu-of-78-sms-plans", "num_splits-a-gpu-of-132-sms-plans")(case)
                                          and case.base == "full-batch-next-n-3-model-rows")),
        site=_call("store") & m.Call(args=[m.ZeroOrMore(), m.Arg(keyword=m.Name("mask"), value=m.Name("fill_mask")),
                                           m.ZeroOrMore()]),
        mutate=lambda node: node.with_changes(args=[
            arg.with_changes(value=_expr("fill_mask | (((offs_p < max_model_len) & (max_model_len % BLOCK_N == 0)"
                                         " & (max_model_len >= 65536)) != 0)[:, None]"))
            if arg.keyword is not None and arg.keyword.value == "mask" else arg for arg in node.args]),
    ),
    Bug(
        name="live-rows-counted-within-the-group",
        description="the causal bound tests a row's slot within its group, not within the sequence, against"
                    " the live-row count: a group past the first that is partly live computes its dead rows",
        exposed_by=Exposure("a live-row count inside a slot group past the first (ragged next_n_lens)",
                            _logits(lambda c: _partly_live_later_group(c))),
        site=m.Assign(targets=[m.AssignTarget(m.Name("causal_bound"))]),
        mutate=lambda node: node.with_changes(value=_with_arg(0, "tl.arange(0, SLOT_GROUP) < live_rows")(node.value)),
    ),
    Bug(
        name="next-n-lens-skipped-at-one-slot",
        description="the launcher drops next_n_lens when next_n is 1 (every live count taken as 1): a"
                    " sequence with no live row, which validate=False lets through, computes its row",
        exposed_by=Exposure("next_n 1, a live-row count of 0 under validate=False (an input edit)",
                            lambda case: _edit("validate-false-leaves-values-unchecked")(case)
                            and case.base == "small-next-n-1"),
        site=m.Arg(keyword=m.Name("HAS_NEXT_N_LENS")),
        mutate=lambda node: node.with_changes(value=_expr("next_n_lens is not None and dims.next_n > 1")),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="tuning-told-validate-for-preshuffle",
        description="the launcher hands the tuning policy validate where it takes preshuffle: a block-flat"
                    " call gets the preshuffled pipeline depth, the same values at another speed",
        exposed_by=Exposure("a block-flat case whose stage count is the launcher's (the planned launch checked"
                            " against the policy)",
                            _logits(lambda c: not c.preshuffle and c.num_stages is None)),
        site=m.Call(func=m.Name("resolve_tuning")),
        mutate=_with_arg(2, "validate"),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="unknown-keyword-by-substring",
        description="the launcher looks a keyword up in the knobs' names joined into one string: a part of"
                    " a knob's name (block) passes as a knob and is silently ignored",
        exposed_by=Exposure("a keyword that is part of a knob's name (an input edit)",
                            _edit("unknown-keyword-part-of-a-knob")),
        site=m.ComparisonTarget(operator=m.NotIn(), comparator=m.Name("TUNING_KNOBS")),
        mutate=lambda node: node.with_changes(comparator=_expr('", ".join(TUNING_KNOBS)')),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="upstream-keyword-taken-and-ignored",
        description="the launcher takes DeepGEMM's clean_logits among its keywords (\"callers move over"
                    " unchanged\") and ignores it: a caller asking for the -inf cells to be left alone gets them"
                    " written, without a word",
        exposed_by=Exposure("a keyword of the upstream op (an input edit)",
                            _edit("unknown-keyword-upstream-clean_logits")),
        site=m.ComparisonTarget(operator=m.NotIn(), comparator=m.Name("TUNING_KNOBS")),
        mutate=lambda node: node.with_changes(comparator=_expr('(*TUNING_KNOBS, "clean_logits")')),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="knob-given-as-none-refused",
        description="the launcher takes a knob given as None, the documented default, for an unknown keyword:"
                    " a caller that forwards a partly set tuning config is refused",
        exposed_by=Exposure("every knob given as None (an input edit)", _edit("knobs-each-given-as-none")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("unknown"))]),
        mutate=lambda node: node.with_changes(value=_expr(
            "[name for name in knobs if name not in TUNING_KNOBS or knobs[name] is None]")),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="cache-reinterpreted-from-its-storage",
        description="the launcher reinterprets the cache as fp8 from the start of its storage: a cache that"
                    " starts inside its buffer (one layer of a pool) is read from the buffer's start",
        exposed_by=Exposure("a kv_cache that starts inside its buffer (an input edit)",
                            _edit("kv_cache-inside-its-buffer")),
        site=_method("kv_cache", "view"),
        mutate=_replace_with("torch.empty(0, dtype=torch.float8_e4m3fn, device=kv_cache.device)"
                             ".set_(kv_cache.untyped_storage(), 0, kv_cache.shape, kv_cache.stride())"),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="table-stride-from-shape",
        description="the launcher passes the block table's width as its row stride",
        exposed_by=Exposure("a column slice of a wider block table (row stride != width)",
                            _logits(lambda c: c.table == "column-slice")),
        site=_method("block_table", "stride"),
        mutate=_replace_with("block_table.shape[1]"),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="default-splits-unguarded",
        description="the default split count drops its floor of one: short contexts launch no program",
        exposed_by=Exposure("default splits where the table spans fewer than MIN_TILES_PER_PROGRAM tiles",
                            _logits(lambda c: c.splits is None and _table_tiles(c) < MIN_TILES_PER_PROGRAM)),
        site=m.Call(func=m.Name("max"), args=[m.Arg(m.Integer("1")), m.Arg(_names("wanted"))]),
        mutate=_keep_arg(1),
        path=TUNING,
        side=HOST,
    ),
    Bug(
        name="last-used-block-unchecked",
        description="validation counts the blocks a sequence uses rounding down: its last, partly used block"
                    " may hold any id",
        exposed_by=Exposure("a bad block id in the last, partly used column of a sequence (an input edit)",
                            _edit("block_table-num-blocks-in-last-used-column",
                                  "block_table-negative-in-last-used-column")),
        site=m.BinaryOperation(operator=m.FloorDivide(), left=_names("lens", "kv_block")),
        mutate=lambda node: node.with_changes(left=_expr("lens[:, None]")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="shared-table-row-checked-against-the-first-sequence",
        description="validation checks a table of one shared row (row stride 0, parallel samples of one prompt)"
                    " once, against the first sequence's context: a bad id only a longer sequence reads passes",
        exposed_by=Exposure("a bad id in a shared table row that only the last, longest sequence reads (an input"
                            " edit)", _edit("block_table-rows-shared-bad-where-only-the-last-reads")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("used"))]),
        mutate=lambda node: node.with_changes(value=_expr(
            "torch.arange(table.shape[1])[None, :] < ((lens[:1] if block_table.stride(0) == 0 else lens)[:, None]"
            " + dims.kv_block - 1) // dims.kv_block")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="uniform-batch-table-checked-by-its-first-row",
        description="validation checks only the first row of a batch whose contexts are all alike (\"a captured"
                    " graph's uniform batch: one row's check serves all\"): a bad id in another row passes",
        exposed_by=Exposure("a bad id in the last sequence's table row, every context alike (an input edit)",
                            lambda case: isinstance(case, RejectionCase) and case.base == "three-sequences-alike"),
        site=m.Assign(targets=[m.AssignTarget(m.Name("bad"))], value=m.BinaryOperation(left=m.Name("used"))),
        mutate=lambda node: node.with_changes(value=_expr(
            f"({_code(node.value)})[:1] if bool((lens == lens[0]).all()) else {_code(node.value)}")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="max-model-len-of-exactly-type-int",
        description="validation asks max_model_len to be of type int exactly (\"one test refuses bools, floats"
                    " and numpy ints\"): an int of the caller's own type, a config enum, is refused",
        exposed_by=Exposure("max_model_len as an int subclass (an input edit)", _edit("max_model_len-an-int-subclass")),
        site=m.BooleanOperation(left=m.Call(func=m.Name("isinstance"), args=[m.Arg(m.Name("max_model_len")),
                                                                             m.ZeroOrMore()])),
        mutate=_replace_with("type(max_model_len) is not int"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="large-batch-contexts-screened-by-their-extremes",
        description="from 64 sequences on, validation compares the least context with the fewest live rows"
                    " (\"one reduction each instead of a mask\"): a mid-batch sequence shorter than its own live"
                    " rows passes",
        exposed_by=Exposure("a mid-batch context below its live rows in a batch of 1,025 (an input edit)",
                            lambda case: isinstance(case, RejectionCase) and case.base == "many-sequences"
                            and case.edit == "context_lens-below-its-live-rows-mid-batch"),
        site=m.Comparison(left=m.Name("lens"), comparisons=[m.ComparisonTarget(operator=m.LessThan(),
                                                                                comparator=m.Name("live"))]),
        mutate=_replace_with("((lens.min() < live.min()) if dims.batch >= 64 else (lens < live))"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="large-batch-table-screened-on-shared-columns-and-last-entries",
        description="from 64 sequences on, validation checks the table's columns every sequence uses and each"
                    " sequence's last entry (\"where a decode step appends its block\"): a bad id mid-row passes"
                    " and the kernel reads outside the cache",
        exposed_by=Exposure("a bad id mid-row of a mid-batch sequence in a batch of 1,025 (an input edit)",
                            lambda case: isinstance(case, RejectionCase) and case.base == "many-sequences"
                            and case.edit == "block_table-num-blocks-mid-row-mid-batch"),
        site=m.Assign(targets=[m.AssignTarget(m.Name("used"))]),
        mutate=lambda node: node.with_changes(value=_expr(
            "((torch.arange(table.shape[1])[None, :] < (lens.min() + dims.kv_block - 1) // dims.kv_block)"
            " | (torch.arange(table.shape[1])[None, :] == used_blocks - 1)"
            f") if dims.batch >= 64 else {_code(node.value)}")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="alignment-asked-of-q-too",
        description="validation asks q, as the cache, to start on a 4-byte boundary: a q one byte into its"
                    " buffer, a valid fp8 tensor, is refused",
        exposed_by=Exposure("q one element into its buffer (an input edit)", _edit("q-one-element-into-its-buffer")),
        site=m.BooleanOperation(right=m.BinaryOperation(operator=m.Modulo())),
        mutate=lambda node: node.with_changes(right=_expr("(kv_cache.data_ptr() | q.data_ptr()) % PACKED_SCALE_BYTES")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="uint32-taken-for-int32",
        description="validation lets uint32 lengths and block ids through as int32 (the same four bytes a"
                    " value): the launch then fails inside Triton, or a uint32 table is read as signed",
        exposed_by=Exposure("a length or table tensor of uint32 (an input edit)",
                            _edit("context_lens-dtype-uint32", "block_table-dtype-uint32", "next_n_lens-dtype-uint32")),
        site=m.Comparison(left=_names("tensor"), comparisons=[m.ComparisonTarget(operator=m.NotEqual(),
                                                                                  comparator=m.Name("dtype"))]),
        mutate=lambda node: _expr("tensor.dtype != dtype and (tensor.dtype, dtype) != (torch.uint32, torch.int32)"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="kv-row-width-as-a-minimum",
        description="validation takes kv_cache rows at least D+4 bytes wide, not exactly: a wider row is"
                    " read as the packed layout it is not",
        exposed_by=Exposure("kv_cache rows one byte wider than D+4 (an input edit)",
                            _edit("kv_cache-row-bytes-wide")),
        site=m.Comparison(left=m.Name("row_bytes")),
        mutate=_with_operator(cst.LessThan()),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="weights-rows-may-stride",
        description="validation lets the head weights' rows lie apart (a column slice of a wider tensor),"
                    " which the kernel reads as contiguous",
        exposed_by=Exposure("weights as a column slice of a wider tensor (an input edit)",
                            _edit("weights-padded-rows")),
        site=m.Call(func=m.Name("_check_tensor"), args=[m.Arg(m.SimpleString('"weights"')), m.ZeroOrMore()]),
        mutate=lambda node: _with_keyword_arg(node, "rows_may_stride", cst.Name("True")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="num-stages-bool-accepted",
        description="the stage-count check takes any int, so True passes as one stage",
        exposed_by=Exposure("num_stages=True (an input edit)", _edit("num_stages-bool")),
        site=m.Call(func=m.Name("_positive_int"), args=[m.Arg(m.Name("num_stages"))]),
        mutate=_replace_with("(isinstance(num_stages, int) and num_stages >= 1)"),
        path=TUNING,
        side=HOST,
    ),
    Bug(
        name="weights-heads-as-a-minimum",
        description="validation takes the head weights as at least H columns wide, not exactly: a wider"
                    " row is read as H weights of the wrong heads",
        exposed_by=Exposure("weights one head wider (an input edit)", _edit("weights-heads-long")),
        site=m.Call(func=m.Name("_check_shape"), args=[m.Arg(m.SimpleString('"weights"')), m.ZeroOrMore()]),
        mutate=_with_arg(1, "weights[:, :heads]"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="preshuffle-layout-checked-only-with-values",
        description="validation checks preshuffle's block size only with validate=True, which SPEC lets a"
                    " caller skip for values only",
        exposed_by=Exposure("preshuffle with KVB % 16 != 0 under validate=False (an input edit)",
                            lambda case: _edit("preshuffle-blocks-not-multiple-of-16")(case) and not case.validate),
        site=m.BooleanOperation(left=m.Name("preshuffle"), right=m.Comparison(left=m.BinaryOperation(
            left=m.Name("kv_block")))),
        mutate=lambda node: cst.BooleanOperation(left=cst.Name("check_values"), operator=cst.And(), right=node),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="kv-blocks-may-lie-apart",
        description="validation checks the cache's layout within one block only: blocks that lie apart (one"
                    " layer of a pool of several) pass, and the kernel reads them as adjacent",
        exposed_by=Exposure("kv_cache blocks apart, each dense (an input edit)", _edit("kv_cache-blocks-apart")),
        site=m.Call(func=m.Name("_check_tensor"), args=[m.Arg(m.SimpleString('"kv_cache"')), m.ZeroOrMore()]),
        mutate=_with_arg(1, "kv_cache[:1]"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="negative-next-n-lens-accepted",
        description="validation rejects a live-row count of 0 but not a negative one",
        exposed_by=Exposure("next_n_lens = -1 (an input edit)", _edit("next_n_lens-negative")),
        site=m.Comparison(left=m.Name("live"), comparisons=[
            m.ComparisonTarget(operator=m.LessThan(), comparator=m.Integer("1"))]),
        mutate=_replace_with("(live == 0)"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="context-bound-off-by-one",
        description="validation accepts a context one token longer than max_model_len",
        exposed_by=Exposure("context_lens = max_model_len + 1 (an input edit)",
                            _edit("context_lens-past-max-model-len")),
        site=m.Comparison(left=m.Name("lens"), comparisons=[
            m.ComparisonTarget(operator=m.GreaterThan(), comparator=m.Name("max_model_len"))]),
        mutate=_replace_with("(lens > max_model_len + 1)"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="context-floor-over-the-batch",
        description="every context held to the batch's fewest live rows, not its own sequence's: a context"
                    " shorter than its own live rows passes when another sequence has fewer",
        exposed_by=Exposure("a context one token short of its own live rows, another sequence with fewer"
                            " (an input edit)", _edit("context_lens-below-its-own-next-n-lens")),
        site=m.Comparison(left=m.Name("lens"), comparisons=[
            m.ComparisonTarget(operator=m.LessThan(), comparator=m.Name("live"))]),
        mutate=_replace_with("(lens < live.min())"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="max-model-len-only-nonzero",
        description="max_model_len's range check split into nonzero and at most the bound: a negative"
                    " value passes and fails later under another argument's name",
        exposed_by=Exposure("max_model_len = -1 (an input edit)", _edit("max_model_len-negative")),
        site=m.UnaryOperation(operator=m.Not(), expression=m.Comparison(left=m.Integer("1"))),
        mutate=_replace_with("(not max_model_len or max_model_len > MAX_MODEL_LEN)"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="kv-cache-held-to-16-bytes",
        description="the cache held to a 16-byte boundary, for wide vector loads of its keys: a valid cache on"
                    " its scales' 4-byte boundary (a view into a larger buffer) is refused",
        exposed_by=Exposure("a cache 4 bytes into its buffer (an input edit)",
                            _edit("kv_cache-on-its-scales-boundary-only")),
        site=m.BooleanOperation(right=m.BinaryOperation(left=_method("kv_cache", "data_ptr"), operator=m.Modulo())),
        mutate=lambda node: node.with_changes(right=_expr("kv_cache.data_ptr() % 16")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="kv-cache-padded-rows-accepted",
        description="the cache's rows taken as D + 4 bytes or that rounded up to 16-byte sectors, as another"
                    " layout pads them: the kernel reads the co-packed layout, and a padded cache's scales elsewhere",
        exposed_by=Exposure("a cache whose rows are padded to 16 bytes (an input edit)",
                            _edit("kv_cache-rows-padded-to-16-bytes")),
        site=m.Comparison(left=m.Name("row_bytes")),
        mutate=_replace_with("row_bytes not in (head_dim + PACKED_SCALE_BYTES,"
                             " -(-(head_dim + PACKED_SCALE_BYTES) // 16) * 16)"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="kv-cache-aligned-by-its-storage-offset",
        description="the cache's alignment read from its offset into its storage, which fake tensors have: a"
                    " storage that itself starts off the scales' boundary passes, its scales misaligned on a GPU",
        exposed_by=Exposure("a cache on a storage one byte into its buffer (an input edit)",
                            _edit("kv_cache-storage-off-its-scales-boundary")),
        site=m.BooleanOperation(right=m.BinaryOperation(left=_method("kv_cache", "data_ptr"), operator=m.Modulo())),
        mutate=_replace_with("kv_cache.storage_offset() % PACKED_SCALE_BYTES"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="table-checked-only-past-its-maximum",
        description="the block table's entries checked only when its largest entry is out of range (one"
                    " reduction in the common case): a used entry of -1 in a table otherwise in range passes",
        exposed_by=Exposure("a negative used entry, every other entry in range (an input edit)",
                            _edit("block_table-negative-the-rest-in-range")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("bad"))], value=m.BinaryOperation(left=m.Name("used"))),
        mutate=lambda node: node.with_changes(value=_expr(
            "used & ((table < 0) | (table >= dims.num_blocks)) & (int(table.max()) >= dims.num_blocks)")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="out-held-to-16-bytes",
        description="a caller's out held to a 16-byte boundary, for wide stores: a valid out one float into"
                    " its buffer is refused",
        exposed_by=Exposure("a caller's out 4 bytes into its buffer (an input edit)",
                            _edit("out-one-float-into-its-buffer")),
        site=m.BooleanOperation(right=m.Comparison(left=_method("out", "stride"))),
        mutate=_replace_with("out is not None and (out.shape[0] > 1 and out.stride(0) < max_model_len"
                             " or out.device.type != 'meta' and out.data_ptr() % 16 != 0)"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="negated-views-taken-for-conjugated",
        description="the check for lazily transformed views tests the conjugate bit, which no real tensor has,"
                    " not the negative bit: a negated view of weights is read without its sign",
        exposed_by=Exposure("a tensor with torch's negative bit set (an input edit)",
                            _edit(*(f"{name}-negated-view" for name in
                                    ("weights", "kv_cache", "context_lens", "block_table", "next_n_lens", "out")))),
        site=_method("tensor", "is_neg"),
        mutate=_replace_with("tensor.is_conj()"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="validate-taken-as-any-int",
        description="validate checked as an int, which a bool is: validate=1 passes where the contract wants"
                    " a bool",
        exposed_by=Exposure("validate=1 (an input edit)", _edit("validate-not-a-bool")),
        site=m.UnaryOperation(operator=m.Not(), expression=_call_named("isinstance")
                              & m.Call(args=[m.Arg(m.Name("check_values")), m.Arg()])),
        mutate=_replace_with("not isinstance(check_values, int)"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="query-tile-bound-without-the-keys",
        description="the query tile's bound set at 256 KiB, a power of two past the query tile alone, the key"
                    " tiles beside it forgotten: H x D = 256 KiB passes, runs on the interpreter, and fails at"
                    " launch on a GPU",
        exposed_by=Exposure("H x D = 256 KiB (an input edit)", _edit("q-query-tile-past-shared-memory")),
        site=m.Comparison(left=m.Name("narrowest_tile")),
        mutate=_replace_with("narrowest_tile > 2 * MAX_QUERY_TILE_BYTES"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="contiguity-checked-by-rows",
        description="a tensor held to dense rows of its first dimension (the last stride one, the first"
                    " stride the row's size) instead of contiguity: inner dimensions swapped in memory pass",
        exposed_by=Exposure("q or the cache dense with two inner dimensions swapped (an input edit)",
                            _edit("q-dense-permuted-1-2", "q-dense-permuted-2-3", "kv_cache-dense-permuted-1-3")),
        site=_method("tensor", "is_contiguous"),
        mutate=_replace_with("(tensor.stride(-1) == 1 and tensor.stride(0) * tensor.shape[0] == tensor.numel())"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="result-buffer-kept-across-calls",
        description="the launcher keeps one logits buffer per size and returns it from every call without"
                    " out: the next call of that size overwrites the result a caller still holds",
        exposed_by=Exposure("two calls without out (a case that passes tuning knobs: its run without them)",
                            _logits(lambda c: bool(c.tuning()))),
        site=_method("torch", "empty") & _names("max_model_len"),
        mutate=lambda node: cst.Call(func=_expr("plan_launch.__dict__.setdefault"), args=[
            cst.Arg(_expr("(dims.batch * dims.next_n, max_model_len, q.device)")), cst.Arg(node)]),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="num-splits-checked-by-range",
        description="the split count is checked by range only: 2.0 or 1.5 pass, and fail inside the launch",
        exposed_by=Exposure("num_splits as a float (an input edit)", _edit("num_splits-float", "num_splits-fraction")),
        site=m.UnaryOperation(operator=m.Not(), expression=m.Call(func=m.Name("_positive_int"),
                                                                  args=[m.Arg(m.Name("num_splits"))])),
        mutate=_replace_with("(isinstance(num_splits, bool) or num_splits < 1)"),
        path=TUNING,
        side=HOST,
    ),
    Bug(
        name="q-takes-either-e4m3",
        description="validation takes q in either e4m3 encoding: fnuz (bias 8, no negative zero) is read as fn",
        exposed_by=Exposure("q as float8_e4m3fnuz (an input edit)", _edit("q-dtype-float8_e4m3fnuz")),
        site=m.Call(func=m.Name("_check_tensor"), args=[m.Arg(m.SimpleString('"q"')), m.ZeroOrMore()]),
        mutate=_with_arg(2, "q.dtype if q.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz)"
                            " else torch.float8_e4m3fn"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="one-out-row-taken-as-overlapping",
        description="validation rejects a caller's out whose row stride is under its width even with a single"
                    " row, which overlaps nothing",
        exposed_by=Exposure("one out row with a row stride of one (an input edit)",
                            _edit("out-one-row-of-any-row-stride")),
        site=m.BooleanOperation(left=m.Comparison(left=m.Name("out")), operator=m.And(), right=m.Comparison(
            left=m.Subscript(value=m.Attribute(value=m.Name("out"), attr=m.Name("shape"))))),
        mutate=lambda node: node.left,
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="size-one-columns-need-unit-stride",
        description="validation asks a row-strided tensor (out, the block table) for unit stride in its last"
                    " dimension even when that dimension has one element",
        exposed_by=Exposure("out or the block table with one column of any stride (an input edit)",
                            _edit("out-size-one-dims-strided", "block_table-size-one-dims-strided")),
        site=m.BooleanOperation(operator=m.Or(), right=m.Comparison(left=m.Subscript(
            value=m.Attribute(value=m.Name("tensor"), attr=m.Name("shape"))))),
        mutate=lambda node: node.left,
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="scale-offset-in-32-bit-float-units",
        description="the per-token gather addresses scales as floats from the cache's start, the block offset"
                    " in 32 bits: it wraps past 2**33 bytes of pool",
        exposed_by=Exposure("a pool over 8 GiB on the per-token gather",
                            _logits(lambda c: c.pool == "over-8gib" and c.kv_block % _tile(c) != 0)),
        site=_TOKEN_SCALE_POINTERS,
        mutate=lambda node: node.with_changes(value=_expr(
            "kv_ptr.to(tl.pointer_type(tl.float32)) + block_id * (BLOCK_BYTES // 4) + KV_BLOCK * HEAD_DIM // 4"
            " + slot")),
    ),
    Bug(
        name="causal-bound-as-a-float",
        description="rows past the live count get a causal bound of -inf, which makes every bound and the"
                    " positions compared with it float32: past 2**24 tokens a bound rounds up to a position"
                    " the row must not see",
        exposed_by=Exposure("a context past float32's exact integers, a row's bound rounding up (an input edit)",
                            _edit("context_lens-past-float32-integers")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("causal_bound"))]),
        mutate=lambda node: node.with_changes(value=_with_arg(2, 'float("-inf")')(node.value)),
    ),
    Bug(
        name="flat-key-offset-from-the-position-in-int32",
        description="a block-flat key's byte offset in its block taken as p * D modulo the block's key bytes,"
                    " in int32: past 2**31 / D tokens the product wraps and keys are read from the wrong place",
        exposed_by=Exposure("a block-flat context past 2**31 / D tokens (an input edit)",
                            lambda c: _edit("context_lens-past-float32-integers")(c) and c.base.endswith("kvb256")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("key_offs"))],
                      value=m.BinaryOperation(right=m.Subscript(value=m.Name("offs_d")))),
        mutate=lambda node: node.with_changes(value=_expr(
            "(offs_t * HEAD_DIM % (KV_BLOCK * HEAD_DIM))[:, None] + offs_d[None, :]")),
    ),
    Bug(
        name="causal-bound-only-where-the-context-ends",
        description="only the program holding the context's last tile applies the causal bound; the others"
                    " let every live row see the whole context",
        exposed_by=Exposure("a causal diagonal that reaches back into an earlier split's tiles",
                            _logits(lambda c: _diagonal_before_the_last_split(c))),
        site=m.Assign(targets=[m.AssignTarget(m.Name("visible"))]),
        mutate=lambda node: node.with_changes(value=_expr(
            "offs_p[:, None] <= tl.where(tile_end == context_tiles, causal_bound,"
            " tl.where(offs_m < live_rows, context_len - 1, -1))[None, :]")),
    ),
    Bug(
        name="unused-table-entries-zeroed",
        description="the value check zeroes the block table's unused entries in its host copy, which on the"
                    " CPU is the caller's own table",
        exposed_by=Exposure("a block table whose unused entries are not 0 (any logits case, on the CPU)",
                            _logits(lambda c: True)),
        site=_TABLE_COPY,
        mutate=lambda node: node.with_changes(value=_expr(
            "block_table.narrow(1, 0, int(used_blocks.max())).cpu()"
            ".masked_fill_(torch.arange(int(used_blocks.max()))[None, :] >= used_blocks, 0)")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="value-checks-remembered-per-buffer",
        description="the value checks run once per pair of context_lens and block_table buffers: a decode loop"
                    " that rewrites its buffers in place gets bad values through",
        exposed_by=Exposure("a value rejection whose tensors first held valid values (an input edit)",
                            lambda case: isinstance(case, RejectionCase) and case.rejects
                            and EDITS[case.edit].reads_values),
        site=m.Call(func=m.Name("_check_values")),
        mutate=lambda node: _expr(
            "check_inputs.__dict__.setdefault('passed', set()).isdisjoint("
            "{(context_lens.data_ptr(), block_table.data_ptr())}) and not check_inputs.__dict__['passed'].add("
            "(context_lens.data_ptr(), block_table.data_ptr())) and " + _code(node)),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="table-verdict-noted-on-the-tensor",
        description="the launcher notes a passed value check on the caller's block table (an attribute) and"
                    " skips the check for that tensor from then on: a decode loop that writes a bad id into"
                    " the table it passed before gets no error",
        exposed_by=Exposure("a bad block-table value written into a table a valid call passed first (input"
                            " edits), or calls that leave attributes on the caller's tensors (the stateless case)",
                            lambda case: _STATELESS_CALLS.holds(case) or (
                                isinstance(case, RejectionCase) and EDITS[case.edit].argument == "block_table"
                                and EDITS[case.edit].reads_values and EDITS[case.edit].valid_values_first)),
        site=m.Arg(keyword=m.Name("check_values")),
        mutate=lambda node: node.with_changes(value=_expr(
            "validate and not (getattr(block_table, 'values_checked', False)"
            " or setattr(block_table, 'values_checked', True))")),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="cache-alignment-checked-on-the-host-only",
        description="the cache's 4-byte alignment is checked for host tensors only, on the grounds that a GPU's"
                    " allocator aligns its blocks: a misaligned view of a GPU's cache is accepted, and its float32"
                    " scale loads fault",
        exposed_by=Exposure("a cache view off its scales' boundary, planned on tensors a GPU holds (an input edit)",
                            lambda case: isinstance(case, RejectionCase) and "scales-boundary" in case.edit),
        site=m.Comparison(left=m.Attribute(value=m.Attribute(value=m.Name("kv_cache"), attr=m.Name("device"))),
                          comparisons=[m.ComparisonTarget(operator=m.NotEqual(), comparator=m.SimpleString('"meta"'))]),
        mutate=lambda node: _expr('kv_cache.device.type == "cpu"'),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="table-checked-where-it-lies",
        description="the value check reads the block table where it lies rather than from a host copy (one"
                    " transfer fewer): on a GPU the table then meets the check's host-side column index, and"
                    " every checked call raises",
        exposed_by=Exposure("any computed valid call with its values checked, planned on tensors a GPU holds"
                            " (input edits)",
                            lambda case: isinstance(case, RejectionCase) and not case.rejects and case.validate
                            and not case.planned_only),
        site=_TABLE_COPY,
        mutate=lambda node: node.with_changes(
            value=_expr("block_table.narrow(1, 0, int(used_blocks.max())).to(torch.int64)")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="sms-scaled-by-the-mps-share-into-a-float",
        description="the split policy fills only the SMs an MPS client's share allows"
                    " (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), the count left a float: on a GPU that MPS shares among"
                    " serving processes the split count and the grid are floats, which no GPU launches",
        exposed_by=Exposure("a full decode batch's split count left to the launcher, planned on tensors a GPU"
                            " holds in an MPS client's environment (an input edit)",
                            _edit("num_splits-left-to-fill-the-gpu")),
        site=m.Attribute(attr=m.Name("multi_processor_count")),
        mutate=lambda node: _expr(f'({_code(node)} * float(__import__("os").environ["{_MPS_SHARE}"]) / 100'
                                  f' if "{_MPS_SHARE}" in __import__("os").environ else {_code(node)})'),
        path=TUNING,
        side=HOST,
    ),
    Bug(
        name="context-checked-without-validate",
        description="context_lens past max_model_len is checked, a host sync, even under validate=False",
        exposed_by=Exposure("a context past max_model_len under validate=False (an input edit)",
                            lambda case: _edit("context_lens-past-max-model-len")(case) and not case.validate),
        site=m.Arg(keyword=m.Name("check_values")),
        mutate=lambda node: node.with_changes(value=_expr(
            "validate or (isinstance(context_lens, torch.Tensor) and context_lens.device.type != 'meta'"
            " and bool((context_lens.cpu() > max_model_len).any()))")),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="next-n-lens-unchecked-at-one-slot",
        description="the live-row counts are not checked at next_n 1, where every valid count is 1",
        exposed_by=Exposure("next_n_lens out of range at next_n 1 (an input edit)",
                            lambda case: _edit("next_n_lens-zero", "next_n_lens-negative", "next_n_lens-past-next-n")(case)
                            and case.base == "small-next-n-1"),
        site=m.Assign(targets=[m.AssignTarget(m.Name("bad"))],
                      value=m.BinaryOperation(left=m.Comparison(left=m.Name("live")))),
        mutate=lambda node: node.with_changes(value=_expr("((live < 1) | (live > dims.next_n)) & (dims.next_n > 1)")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="out-in-the-default-dtype",
        description="the launcher allocates the result without a dtype, in torch's default: float32 until a"
                    " caller sets another (float64, for a reference computation), then the result is float64",
        exposed_by=Exposure("any case, planned on the meta device under a float64 default dtype",
                            _logits(lambda c: True)),
        site=_method("torch", "empty"),
        mutate=_replace_with("torch.empty(dims.batch * dims.next_n, max_model_len, device=q.device)"),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="out-off-q-device",
        description="the launcher allocates the result without a device, on the CPU: right on the interpreter,"
                    " a host pointer handed to the kernel on a GPU",
        exposed_by=Exposure("any case, planned on the meta device", _logits(lambda c: True)),
        site=_method("torch", "empty"),
        mutate=_replace_with("torch.empty(dims.batch * dims.next_n, max_model_len, dtype=torch.float32)"),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="out-taken-dense-unvalidated",
        description="under validate=False the launcher takes a caller's out as dense, its row stride"
                    " max_model_len, saving a stride read: an out whose rows lie further apart is written wrong",
        exposed_by=Exposure("a caller's out with rows apart, under validate=False (an input edit)",
                            lambda c: isinstance(c, RejectionCase) and not c.validate and c.edit.startswith("out-")
                            and EDITS[c.edit].error is None),
        site=_method("out", "stride"),
        mutate=_replace_with("(out.stride(0) if validate else max_model_len)"),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="splits-capped-at-the-table",
        description="the launcher launches no split past the table's last tile, but tells the kernel the"
                    " caller's split count: the rows' columns past the table are never filled",
        exposed_by=Exposure("more splits than the table has tiles (num_splits 16)",
                            _logits(lambda c: bool(c.splits) and c.splits > _table_tiles(c))),
        site=m.Call(func=m.Name("Launch")),
        mutate=_with_arg(0, "(dims.batch * groups, min(tuning.num_splits,"
                            " -(-dims.max_blocks * dims.kv_block // tuning.block_n)))"),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="uniform-next-n-lens-dropped",
        description="the launcher drops next_n_lens when every sequence has the same count, as if it were"
                    " next_n: a batch all below next_n computes its dead rows",
        exposed_by=Exposure("next_n_lens the same for every sequence, below next_n",
                            _logits(lambda c: isinstance(c.next_n_lens, tuple) and len(set(c.next_n_lens)) == 1
                                    and c.next_n_lens[0] < c.next_n)),
        site=m.Arg(keyword=m.Name("HAS_NEXT_N_LENS")),
        mutate=lambda node: node.with_changes(value=_expr(
            "next_n_lens is not None and bool((next_n_lens != next_n_lens[0]).any())")),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="num-splits-unbounded",
        description="any split count is taken: one past 65,535, the grid's second axis on CUDA, fails to launch",
        exposed_by=Exposure("num_splits = 65536 (an input edit)", _edit("num_splits-past-the-grid")),
        site=m.Comparison(left=m.Name("num_splits"), comparisons=[
            m.ComparisonTarget(operator=m.GreaterThan(), comparator=m.Name("MAX_SPLITS"))]),
        mutate=_replace_with("False"),
        path=TUNING,
        side=HOST,
    ),
    Bug(
        name="additive-causal-mask",
        description="the causal mask added as 0 or -inf, the attention idiom: a NaN past a row's window"
                    " (a token it does not see) turns its -inf into NaN",
        exposed_by=Exposure("a NaN scale on a token some rows do not see", _logits(lambda c: c.values == "nan-token")),
        site=_call("where") & m.Call(args=[m.Arg(m.Name("visible")), m.Arg(m.Name("logits")), m.DoNotCare()]),
        mutate=lambda node: _expr('logits + tl.where(visible, 0.0, float("-inf"))'),
    ),
    Bug(
        name="logits-clamped-to-half-range",
        description="logits clamped to +-65504 for a 16-bit top-k downstream: large keys or scales lose their order",
        exposed_by=Exposure("key scales 2**16 times larger", _logits(lambda c: c.values == "large")),
        site=m.BinaryOperation(left=m.Name("logits"), operator=m.Multiply(),
                               right=m.Subscript(value=m.Name("scales"))),
        mutate=lambda node: _expr(f"tl.minimum(tl.maximum({_code(node)}, -65504.0), 65504.0)"),
    ),
    Bug(
        name="one-block-tile-table-row-int32",
        description="the whole-tile gather indexes the block table from its base with pid_b * stride_table in"
                    " int32: rows 2**31 entries apart wrap",
        exposed_by=Exposure("block-table rows past int32 entries apart, a tile inside one block (an input edit)",
                            _edit("block_table-rows-past-int32-entries-apart")),
        site=m.BinaryOperation(left=m.Name("table_row_ptr"), operator=m.Add(),
                               right=m.BinaryOperation(left=m.BinaryOperation(operator=m.Multiply()),
                                                       operator=m.FloorDivide())),
        mutate=lambda node: node.with_changes(left=_expr("block_table_ptr + pid_b * stride_table")),
    ),
    Bug(
        name="fill-row-offsets-int32",
        description="the -inf fill past the context works out its own row offsets in int32: out rows 2**31"
                    " elements apart wrap",
        exposed_by=Exposure("out rows past int32 elements apart, rows past the last context tile (an input edit)",
                            _edit("out-rows-past-int32-elements-apart")),
        site=_call("store") & m.Call(args=[m.ZeroOrMore(), m.Arg(keyword=m.Name("eviction_policy"))]),
        mutate=_with_arg(0, "out_ptr + ((pid_b * NEXT_N + offs_m) * stride_out)[None, :] + offs_p[:, None]"),
    ),
    Bug(
        name="out-kept-per-shape-when-unvalidated",
        description="the unvalidated hot path keeps one out per shape: the next call of that shape overwrites"
                    " the result a caller still holds",
        exposed_by=Exposure("two results allocated under validate=False (odd seeds with tuning knobs)",
                            _logits(lambda c: c.seed % 2 == 1 and bool(c.tuning()))),
        site=_method("torch", "empty") & m.Call(args=[m.Arg(m.BinaryOperation()), m.ZeroOrMore()]),
        mutate=lambda node: _expr(f"({_code(node)} if validate else plan_launch.__dict__.setdefault("
                                  f"(dims.batch * dims.next_n, max_model_len, str(q.device)), {_code(node)}))"),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="result-allocated-filled",
        description="the launcher allocates the result filled with -inf (\"the kernel writes only the causal"
                    " window\"): a fill kernel before every call's own, which writes every cell anyway",
        exposed_by=Exposure("an unchecked GPU call into a result the op allocates",
                            _call_cost(lambda case: not case.checked and not case.caller_out)),
        site=_method("torch", "empty") & m.Call(args=[m.Arg(m.BinaryOperation()), m.ZeroOrMore()]),
        mutate=_replace_with("torch.full((dims.batch * dims.next_n, max_model_len), float('-inf'),"
                             " dtype=torch.float32, device=q.device)"),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="live-counts-made-when-absent",
        description="a call without next_n_lens gets a row of live counts made for it (every row live), which"
                    " the kernel compiled without live counts never reads: a tensor and a fill kernel per call",
        exposed_by=Exposure("an unchecked GPU call without next_n_lens",
                            _call_cost(lambda case: not case.checked and case.call != "preshuffle-lens")),
        site=m.IfExp(test=m.Comparison(left=m.Name("next_n_lens")), body=m.Name("context_lens")),
        mutate=lambda node: node.with_changes(body=_expr("torch.full_like(context_lens, dims.next_n)")),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="launch-synchronized",
        description="a synchronize after every launch, left from debugging (\"a fault shows at the call that"
                    " made it\"): each decode step waits for the GPU, and a captured graph cannot hold the call",
        exposed_by=Exposure("any unchecked GPU call", _call_cost(lambda case: not case.checked)),
        site=m.Call(func=m.Subscript(value=m.Name("_paged_mqa_logits_kernel"))),
        mutate=lambda node: _expr(f"({_code(node)}, torch.cuda.synchronize() if self.out.device.type == 'cuda'"
                                  f" else None)"),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="lengths-read-one-at-a-time",
        description="the value checks read the context lengths one sequence at a time (a list of int()s):"
                    " on a GPU a host sync per sequence, thousands a call at a serving batch; same verdicts",
        exposed_by=Exposure("a checked call at two batch sizes", _call_cost(lambda case: case.checked)),
        site=m.Assign(targets=[m.AssignTarget(m.Name("lens"))], value=_method("context_lens", "to")),
        mutate=lambda node: node.with_changes(value=_expr("torch.tensor([int(n) for n in context_lens],"
                                                          " dtype=torch.int64)")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="live-rows-unchecked-where-a-context-is-short",
        description="the live-row check is skipped where a context is already short of its live rows (\"the"
                    " context check reports it\"): live rows past next_n are blamed on context_lens",
        exposed_by=Exposure("live rows past next_n on a context of next_n tokens (an input edit)",
                            _edit("next_n_lens-past-next-n-and-its-context")),
        site=m.If(body=m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(
            m.Name("bad"))])]), m.ZeroOrMore()])),
        mutate=lambda node: node.with_changes(test=_expr(
            "next_n_lens is not None and not bool((lens < live).any())")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="launch-on-a-stream-of-its-own",
        description="the launcher launches on a stream of its own (\"to overlap the step's attention"
                    " kernels\"): the launch is no longer ordered after the caller's work that wrote its inputs,"
                    " nor the caller's next kernel after it",
        exposed_by=Exposure("any unchecked GPU call", _call_cost(lambda case: not case.checked)),
        site=m.With(items=[m.WithItem(item=m.Name("on_device"))]),
        mutate=lambda node: node.with_changes(items=[
            node.items[0].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.WithItem(_expr("torch.cuda.stream(torch.cuda.Stream(self.out.device)"
                               " if self.out.device.type == 'cuda' else None)"))]),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="op-in-inference-mode",
        description="the op runs under torch.inference_mode (\"no autograd bookkeeping on the decode path\"):"
                    " the result it allocates is an inference tensor, which a caller outside that mode cannot"
                    " update in place",
        exposed_by=Exposure("a result the op allocates (any logits case)", _logits(lambda case: True)),
        site=m.FunctionDef(name=m.Name("fp8_paged_mqa_logits")),
        mutate=lambda node: node.with_changes(decorators=[cst.Decorator(_expr("torch.inference_mode()"))]),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="pool-blocks-counted-from-the-storage",
        description="the blocks a table may name are counted from the cache's storage (\"a layer's cache is a"
                    " view into the engine's pool\"): an entry past the layer, in the next layer's blocks, passes",
        exposed_by=Exposure("a table entry one past the cache in a pool of two layers (an input edit)",
                            _edit("block_table-first-block-of-the-next-layer")),
        site=m.Call(func=m.Name("Dims")),
        mutate=_with_arg(5, "kv_cache.untyped_storage().nbytes() // (kv_block * row_bytes)"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="tunings-remembered-by-sizes",
        description="the launcher remembers each tuning by the call's sizes, layout, device and knobs (\"a decode"
                    " loop plans the same shapes step after step\"): right on every call alone, a cache that"
                    " threads fill and read at once and that grows with every shape served",
        exposed_by=_STATELESS_CALLS,
        site=_TUNING_RESOLVED,
        mutate=lambda node: node.with_changes(value=_expr(
            f"plan_launch.__dict__.setdefault((dims, preshuffle, str(q.device), tuple(sorted(knobs.items()))),"
            f" {_code(node.value)})")),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="tunings-remembered-on-the-kernel-object",
        description="the launcher remembers each tuning by the call's sizes, layout, device and knobs on the"
                    " kernel object, beside Triton's compiled variants (\"a reloaded kernel starts fresh\"):"
                    " right on every call alone, state out of every module's globals that threads share",
        exposed_by=_STATELESS_CALLS,
        site=_TUNING_RESOLVED,
        mutate=lambda node: node.with_changes(value=_expr(
            f"vars(_paged_mqa_logits_kernel).setdefault('tunings', {{}}).setdefault((dims, preshuffle, str(q.device),"
            f" tuple(sorted(knobs.items()))), {_code(node.value)})")),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="last-tuning-kept-in-a-namespace",
        description="the launcher keeps the last call's tuning in a module-level namespace (\"a profiler reads"
                    " what the last call ran\"): right on every call alone, one object whose attribute every"
                    " thread's call replaces under the others",
        exposed_by=_STATELESS_CALLS,
        site=_TUNING_RESOLVED,
        mutate=lambda node: node.with_changes(value=_expr(
            f"vars(globals().setdefault('last_call', __import__('types').SimpleNamespace())).__setitem__('tuning',"
            f" {_code(node.value)}) or last_call.tuning")),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="dependent-launch-option-dropped",
        description="the launch options lose launch_pdl (\"the kernel waits for the previous grid anyway\"): a"
                    " plain launch, whose start no longer overlaps the end of the step's previous kernel",
        exposed_by=Exposure("any unchecked GPU call", _call_cost(lambda case: not case.checked)),
        site=m.Call(func=m.Name("dict"), args=[m.Arg(keyword=m.Name("num_warps")), m.Arg(keyword=m.Name("launch_pdl"))]),
        mutate=lambda node: node.with_changes(args=[node.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)]),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="grid-with-a-split-too-many",
        description="the grid's second axis is the split count plus one (\"a program for the fill\"): the extra"
                    " programs find no tile and no fill of their own, the same values, a launch slot and a length"
                    " read each",
        exposed_by=Exposure("any logits case (its planned grid; on the CPU also its work)", _logits(lambda c: True)),
        site=m.Call(func=m.Name("Launch"), args=[m.Arg(value=m.Tuple()), m.ZeroOrMore()]),
        mutate=lambda node: node.with_changes(args=[node.args[0].with_changes(value=_expr(
            "(dims.batch * groups, tuning.num_splits + 1)")), *node.args[1:]]),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="eight-warps-for-wide-programs",
        description="programs of 512 query rows or more may take, and by default take, 8 warps (\"its accumulator"
                    " spills at 4\"): at one slot per program two warps share a slot's heads, whose sum on a GPU"
                    " then differs in its bits from a 4-warp call's",
        exposed_by=Exposure("a logits case of one slot of 512 heads or more per program",
                            _logits(lambda c: c.heads >= 512)),
        site=m.Assign(targets=[m.AssignTarget(m.Name("warp_choices"))], value=m.Call(func=m.Name("_warp_choices"))),
        mutate=lambda node: node.with_changes(value=_expr(
            f"{_code(node.value)} + ((8,) if rows >= 512 and 8 not in {_code(node.value)} else ())")),
        path=TUNING,
        side=HOST,
    ),
    Bug(
        name="context-bounds-checked-one-at-a-time",
        description="the contexts' lower bound is checked over the whole batch before their upper bounds (\"one"
                    " cheap reduction per bound\"): a batch bad at both quotes a later sequence, not the first",
        exposed_by=Exposure("one sequence past its upper bound, a later one under its lower (an input edit)",
                            _edit("context_lens-two-sequences-out-of-range-first-high-next-low")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("bad"))],
                      value=m.BinaryOperation(left=m.BinaryOperation(left=m.Comparison(left=m.Name("lens"))))),
        mutate=lambda node: node.with_changes(value=_expr(
            "(lens < live) if bool((lens < live).any()) else"
            " ((lens > max_model_len) | (lens > dims.max_blocks * dims.kv_block))")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="table-bounds-checked-one-at-a-time",
        description="the block table's negative entries are looked for over the whole table before those past"
                    " the pool: a table bad at both quotes a later sequence's entry, not the first",
        exposed_by=Exposure("one sequence's block id past the pool, a later one's negative (an input edit)",
                            _edit("block_table-two-sequences-out-of-range-first-high-next-low")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("bad"))], value=m.BinaryOperation(left=m.Name("used"))),
        mutate=lambda node: node.with_changes(value=_expr(
            "used & (table < 0) if bool((used & (table < 0)).any()) else used & (table >= dims.num_blocks)")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="max-model-len-bounded-by-the-out",
        description="max_model_len's upper bound is left to a caller's out of that many columns (\"its columns"
                    " exist already\"): 2**30 + 1 positions accepted, past the int32 positions the kernel keeps",
        exposed_by=Exposure("max_model_len one past its bound with an out as wide (an input edit)",
                            _edit("max_model_len-one-past-its-bound-with-an-out-as-wide")),
        site=m.If(test=m.UnaryOperation(expression=m.Comparison(left=m.Integer("1")))),
        mutate=lambda node: node.with_changes(test=_expr(
            "not 1 <= max_model_len <= (max_model_len if out is not None and out.shape[-1] == max_model_len"
            " else MAX_MODEL_LEN)")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="device-tie-given-to-the-cache",
        description="on a tie of devices the cache's decides (\"the launch runs where the cache is\"), not q's:"
                    " three tensors each side name q instead of the cache",
        exposed_by=Exposure("three tensors on another device than q and two others (an input edit)",
                            _edit("devices-split-evenly")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("common"))]),
        mutate=lambda node: node.with_changes(value=_expr(
            "max(Counter(devices.values()), key=lambda device: (Counter(devices.values())[device],"
            " device == devices[\"kv_cache\"]))")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="caller-depth-fitted-to-shared-memory",
        description="the shared-memory fit moved below the defaults' branch (\"one fit for every path\"): a"
                    " caller's num_stages past the shared memory runs shallower than asked",
        exposed_by=Exposure("64 stages of 128-token tiles, planned (an input edit)", _edit("num_stages-past-shared-memory")),
        site=m.Return(value=_call_named("Tuning")),
        mutate=lambda node: node.with_changes(value=_expr(
            "Tuning(num_splits, block_n, slots_per_program, num_warps, max([s for s in range(1, num_stages + 1)"
            " if shared_memory_bytes(rows, dims.head_dim, block_n, s, preshuffle) <= SHARED_MEMORY_BYTES]"
            " or [num_stages]))")),
        path=TUNING,
        side=HOST,
    ),
    Bug(
        name="device-tie-given-to-the-out",
        description="out checked first for its device (\"the result's device first\"): on a tie the caller's"
                    " out decides, not q, and q is named",
        exposed_by=Exposure("the cache, the lengths and out on another device than q, the weights and the table"
                            " (an input edit)", _edit("devices-split-evenly-out-moved")),
        site=_call_named("_check_one_device"),
        mutate=lambda node: node.with_changes(args=[node.args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT),
                                                    *node.args[:-1]]),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="knobs-held-to-the-exact-int-type",
        description="a knob's type compared exactly (\"bool is an int subclass\"): a caller's int subclass, a config"
                    " enum, is refused",
        exposed_by=Exposure("each knob as the launcher's own pick in an int subclass (input edits)",
                            _edit(*(f"{knob}-an-int-subclass" for knob in
                                    ("block_n", "num_splits", "num_warps", "num_stages", "slots_per_program")))),
        site=m.Return(value=_names("isinstance", "bool", "value")),
        mutate=lambda node: node.with_changes(value=_expr("type(value) is int and value >= 1")),
        path=TUNING,
        side=HOST,
    ),
    Bug(
        name="preshuffle-type-checked-after-its-layout",
        description="the preshuffle flag's type checked after the layout's block size (\"the cheap check"
                    " first\"): a truthy flag of another type on blocks the layout cannot take blames the blocks",
        exposed_by=Exposure("preshuffle=1 on blocks of 3 and 24 tokens (input edits)",
                            _edit("preshuffle-truthy-not-a-bool-on-blocks-not-multiple-of-16")),
        site=m.If(test=m.UnaryOperation(expression=m.Call(func=m.Name("isinstance"),
                                                          args=[m.Arg(m.Name("preshuffle")), m.ZeroOrMore()]))),
        mutate=lambda node: node.with_changes(test=_expr(
            "not isinstance(preshuffle, bool) and not (preshuffle and kv_cache.shape[1] % PRESHUFFLE_TILE)")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="results-double-buffered",
        description="the launcher hands out two result buffers of each shape in turn, as a captured decode loop"
                    " would: a caller's result is overwritten by the call after next",
        exposed_by=Exposure("a result the op allocated, then two calls of its shape on other inputs (every valid"
                            " computed input edit makes them)", _edit("unchanged")),
        site=_method("torch", "empty") & m.Call(args=[m.Arg(m.BinaryOperation()), m.ZeroOrMore()]),
        mutate=lambda node: _expr(f"(lambda ring: (ring.append(ring.pop(0)), ring[0])[1])(plan_launch.__dict__.setdefault("
                                  f"('results', dims.batch * dims.next_n, max_model_len, str(q.device)),"
                                  f" [{_code(node)}, {_code(node)}]))"),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="next-n-lens-clamped-in-place-when-unvalidated",
        description="under validate=False the launcher clamps next_n_lens into range in place: the caller's"
                    " tensor changes, and a sequence with no live row gets one",
        exposed_by=Exposure("an unvalidated call with next_n_lens out of range (an input edit)",
                            _edit("validate-false-leaves-values-unchecked")),
        site=m.IfExp(test=m.Comparison(left=m.Name("next_n_lens")), body=m.Name("context_lens")),
        mutate=lambda node: node.with_changes(orelse=_expr("next_n_lens if validate else next_n_lens.clamp_(1, dims.next_n)")),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="empty-padding-sequence-accepted",
        description="a sequence whose context and live rows are both 0 is taken as padding and let through the"
                    " live-row check: each is out of range, and the op accepts them",
        exposed_by=Exposure("a sequence with context 0 and live rows 0 (an input edit)",
                            _edit("sequence-empty-context-and-no-live-rows")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("bad"))],
                      value=m.BinaryOperation(left=m.Comparison(left=m.Name("live")))),
        mutate=lambda node: node.with_changes(value=_expr(
            "((live < 1) & ~((lens == 0) & (live == 0))) | (live > dims.next_n)")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="expanded-size-one-dims-refused",
        description="a dense tensor with a stride of 0 is refused as a broadcast view: a dimension of size one"
                    " at stride 0 (lengths expanded from a scalar) is contiguous, and valid",
        exposed_by=Exposure("a tensor whose size-one dimensions have stride 0 (an input edit per tensor)",
                            _edit("next_n_lens-size-one-dims-expanded")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("addressable"))]),
        mutate=lambda node: node.with_changes(value=node.value.with_changes(
            orelse=_expr("(tensor.is_contiguous() and 0 not in tensor.stride())"))),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="out-refused-in-an-inputs-storage",
        description="an out in the storage of the head weights is refused as overlapping them, by storage and not"
                    " by the bytes each spans: one workspace holding both, apart, is valid",
        exposed_by=Exposure("out and the head weights carved apart from one buffer (an input edit)",
                            _edit("out-beside-the-weights-in-one-buffer")),
        site=m.If(test=m.BooleanOperation(left=m.BooleanOperation(
            left=m.Comparison(left=m.Name("out"), comparisons=[m.ComparisonTarget(operator=m.IsNot())])),
            right=m.Comparison(left=m.Call(func=m.Attribute(value=m.Name("out"), attr=m.Name("stride")))))),
        mutate=lambda node: node.with_changes(test=_expr(
            "out is not None and (out.shape[0] > 1 and out.stride(0) < max_model_len"
            " or out.device.type != 'meta'"
            " and out.untyped_storage().data_ptr() == weights.untyped_storage().data_ptr())")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="lengths-read-before-their-copy-arrives",
        description="the value checks copy the context lengths to the host without blocking, then read them: on a"
                    " GPU they read what the host memory held before the copy (an earlier step's lengths)",
        exposed_by=Exposure("a valid call planned with its copies to the host in flight (every valid computed input"
                            " edit plans one)", _edit("unchanged")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("lens"))],
                      value=m.Call(func=m.Attribute(value=m.Name("context_lens"), attr=m.Name("to")))),
        mutate=lambda node: node.with_changes(value=_expr('context_lens.to("cpu", torch.int64, non_blocking=True)')),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="used-blocks-counted-in-float32",
        description="the block-table check counts a sequence's blocks as ceil(ctx / KVB) in float32: past 2**24"
                    " tokens the count rounds down and the last used block goes unchecked",
        exposed_by=Exposure("an out-of-range id in the last column of a context of 2**24 + 1 tokens (an input edit)",
                            _edit("block_table-num-blocks-in-the-last-column-past-float32-blocks")),
        site=_USED_BLOCKS,
        mutate=lambda node: _expr("torch.ceil(lens[:, None] / dims.kv_block)"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="capacity-checked-in-float32-blocks",
        description="a context is checked against the table's capacity in blocks counted in float32: past 2**24"
                    " tokens a context one token past the capacity rounds to it and is taken",
        exposed_by=Exposure("a context of 2**24 + 1 tokens on a table of 2**24 tokens (an input edit)",
                            _edit("context_lens-one-past-the-table-past-float32-blocks")),
        site=m.Comparison(left=m.Name("lens"), comparisons=[m.ComparisonTarget(
            operator=m.GreaterThan(), comparator=m.BinaryOperation(left=m.Attribute(attr=m.Name("max_blocks"))))]),
        mutate=lambda node: _expr("(torch.ceil(lens / dims.kv_block) > dims.max_blocks)"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="table-check-whole-blocks-of-the-longest",
        description="the block-table check covers the columns of the longest context counted in whole blocks:"
                    " the longest sequence's partly filled last block goes unchecked",
        exposed_by=Exposure("an out-of-range id in the longest sequence's last block (an input edit)",
                            _edit("block_table-num-blocks-in-longest-last-used-column")),
        site=_USED_COLUMNS,
        mutate=lambda node: _expr("torch.arange(table.shape[1])[None, :] < int(lens.max()) // dims.kv_block"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="table-checked-to-the-longest-from-64-sequences",
        description="from 64 sequences on, validation checks every column up to the longest sequence's last"
                    " block: a shorter sequence's unused entries, which may hold anything, are refused",
        exposed_by=Exposure("a valid batch of many sequences of ragged contexts (an input edit)",
                            lambda case: _edit("unchanged")(case) and case.base == "many-sequences"
                            and case.validate),
        site=_USED_COLUMNS,
        mutate=lambda node: _expr("torch.arange(table.shape[1])[None, :] < ((lens.max() if dims.batch >= 64 else lens)"
                                  "[..., None] + dims.kv_block - 1) // dims.kv_block"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="block-n-any-power-of-two",
        description="block_n checked as a power of two up to 128, no lower bound: 8 passes and fails in the kernel",
        exposed_by=Exposure("block_n = 8 (an input edit)", _edit("block_n-power-of-two-below")),
        site=m.Comparison(left=m.Name("block_n"), comparisons=[m.ComparisonTarget(operator=m.NotIn())]),
        mutate=_replace_with("block_n & (block_n - 1) != 0 or block_n > 128"),
        path=TUNING,
        side=HOST,
    ),
    Bug(
        name="num-warps-zero-taken-as-unset",
        description="num_warps tested for truth: 0 is taken as unset and the default runs instead of a rejection",
        exposed_by=Exposure("num_warps = 0 (an input edit)", _edit("num_warps-zero")),
        site=m.Comparison(left=m.Name("num_warps"), comparisons=[m.ComparisonTarget(operator=m.Is())]),
        mutate=_replace_with("not num_warps"),
        path=TUNING,
        side=HOST,
    ),
    Bug(
        name="result-rows-padded-to-16",
        description="the op's own result is a view of rows padded to 16 floats for aligned stores: not dense,"
                    " so a caller's view(-1) or a copy into a flat buffer fails",
        exposed_by=Exposure("a max_model_len not a multiple of 16", _logits(lambda c: c.max_model_len() % 16 != 0)),
        site=_method("torch", "empty") & m.Call(args=[m.Arg(m.BinaryOperation()), m.ZeroOrMore()]),
        mutate=lambda node: _expr(f"{_code(_with_arg(1, '-(-max_model_len // 16) * 16')(node))}[:, :max_model_len]"),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="table-made-dense",
        description="the launcher hands the kernel block_table.contiguous(): a column slice of a wider table is"
                    " copied on every call",
        exposed_by=Exposure("a column slice of a wider block table", _logits(lambda c: c.table == "column-slice")),
        site=m.Element(value=m.Name("block_table")),
        mutate=lambda node: node.with_changes(value=_expr("block_table.contiguous()")),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="full-rows-shortcut-reads-values",
        description="next_n_lens dropped when every sequence has all next_n rows live, decided on the host:"
                    " a device sync in every call, validate=False included",
        exposed_by=Exposure("next_n_lens given (planning on meta tensors under validate=False)",
                            _logits(lambda c: c.next_n_lens != "none")),
        site=m.Arg(keyword=m.Name("HAS_NEXT_N_LENS")),
        mutate=lambda node: node.with_changes(value=_expr(
            "next_n_lens is not None and not bool((next_n_lens == dims.next_n).all())")),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="context-lens-clamped-in-place-when-unvalidated",
        description="under validate=False the launcher clamps context_lens to max_model_len in place, a safety"
                    " net with no host sync: the caller's lengths change",
        exposed_by=Exposure("a context past max_model_len under validate=False (planned; the inputs compared"
                            " after)", _edit("context_lens-past-max-model-len")),
        site=m.Element(value=m.Name("context_lens")),
        mutate=lambda node: node.with_changes(value=_expr(
            "context_lens if validate else context_lens.clamp_(max=max_model_len)")),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="context-lens-clamped-in-place-after-the-check",
        description="once validation passed the launcher pins context_lens to max_model_len in place (\"a length"
                    " updated on the device after the check cannot take the kernel past a row\"): the values"
                    " stay the same, but every call writes the caller's tensor on its stream, and lengths made"
                    " under inference mode fail every call outside it",
        exposed_by=Exposure("any validated call (the inputs' version counters compared after)", _logits(lambda c: True)),
        site=m.Element(value=m.Name("context_lens")),
        mutate=lambda node: node.with_changes(value=_expr(
            "context_lens.clamp_(max=max_model_len) if validate else context_lens")),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="weights-checked-by-count",
        description="weights checked by element count, not shape: transposed weights of the same size pass",
        exposed_by=Exposure("weights in another shape of the same size (an input edit)",
                            _edit("weights-same-size-other-shape")),
        site=_call_named("_check_shape") & m.Call(args=[m.Arg(m.SimpleString('"weights"')), m.ZeroOrMore()]),
        mutate=lambda node: _expr(f"(None if weights.numel() == batch * next_n * heads else {_code(node)})"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="size-one-exemption-on-the-wrong-dimension",
        description="the size-one exemption of the stride check tests the rows, not the columns: one row with"
                    " strided columns passes",
        exposed_by=Exposure("a strided block table or out of one row (an input edit)", _edit("block_table-strided")),
        site=m.Comparison(left=m.Subscript(value=m.Attribute(value=m.Name("tensor"), attr=m.Name("shape")))),
        mutate=_replace_with("tensor.shape[0] == 1"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="head-sum-as-a-masked-sum",
        description="the head sum taken over all of a program's query columns, each slot's heads picked by a"
                    " 0/1 mask (no reshape of the MMA result): NaN times 0 is NaN, so a NaN head weight of one"
                    " next_n slot spreads to every slot of its group",
        exposed_by=Exposure("a NaN head weight with several next_n slots in one program",
                            _logits(lambda c: c.values == "nan-weight" and _slots(c) > 1)),
        site=m.Call(func=m.Attribute(value=m.Name("tl"), attr=m.Name("sum")),
                    args=[m.Arg(_call("reshape") & m.Call(args=[m.Arg(m.Name("scores")), m.ZeroOrMore()])),
                          m.ZeroOrMore()]),
        mutate=lambda node: _expr("tl.sum(scores[:, None, :] * (tl.arange(0, SLOT_GROUP)[:, None]"
                                  " == (offs_r // HEADS)[None, :]).to(tl.float32)[None, :, :], axis=2)"),
    ),
    Bug(
        name="head-sum-free-to-reorder",
        description="the head sum's reshape lets the compiler reorder (can_reorder=True, \"the sum does not care"
                    " about order\": fewer shuffles per tile on sm_90): the compiler relabels the MMA's registers,"
                    " so each logit sums the heads of other tokens and slots; the interpreter keeps numpy's order",
        exposed_by=Exposure("any context, on the CPU interpreter (which reorders what the compiler may)",
                            _logits(lambda c: True)),
        site=_call("reshape") & m.Call(args=[m.Arg(m.Name("scores")), m.ZeroOrMore()]),
        mutate=lambda node: _with_keyword_arg(node, "can_reorder", cst.Name("True")),
    ),
    Bug(
        name="stage-fit-counts-one-slot",
        description="the default depth is fitted to shared memory with one next_n slot's query rows, not the"
                    " program's: a slot group of two at D=512 with block_n=128 keeps a depth that does not fit"
                    " on Hopper (the same values on the interpreter)",
        exposed_by=Exposure("the pinned defaults, whose grid has several slots per program at D=512 and"
                            " block_n=128", _pinned_defaults),
        site=m.Call(func=m.Name("shared_memory_bytes")),
        mutate=_with_arg(0, "dims.heads"),
        path=TUNING,
        side=HOST,
    ),
    Bug(
        name="narrower-default-tile-past-512-heads",
        description="the default tile is 32 tokens from 512 heads on (\"a program of 512 query rows leaves"
                    " shared memory for narrow tiles only\"), a policy change with no benchmark: the same"
                    " values, another speed for every call of 512 heads or more",
        exposed_by=Exposure("the pinned defaults, whose grid has 512 and 1,024 heads", _pinned_defaults),
        site=m.Assign(targets=[m.AssignTarget(m.Name("block_n"))], value=m.Integer("64")),
        mutate=lambda node: node.with_changes(value=_expr("32 if dims.heads >= 512 else 64")),
        path=TUNING,
        side=HOST,
    ),
    Bug(
        name="query-tile-bound-over-every-slot",
        description="the query tile bound counts the query rows of every next_n slot, pasted from the"
                    " narrowest-MMA check above it, not one slot's heads: valid calls of a wide head dim and"
                    " several slots (16 heads, D=512, next_n 32; 256 heads, D=512, next_n 2) are refused",
        exposed_by=Exposure("the pinned defaults, each shape's call planned", _pinned_defaults),
        site=m.Assign(targets=[m.AssignTarget(m.Name("narrowest_tile"))]),
        mutate=lambda node: node.with_changes(value=_expr("query_rows * head_dim")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="context-lens-error-quotes-the-live-rows",
        description="the context_lens error quotes live[b], pasted from the next_n_lens check beside it, where"
                    " the bad length belongs: a length of 65 past max_model_len reads \"got 3 at b=1\", a value"
                    " that is fine (the verdict unchanged)",
        exposed_by=Exposure("a context_lens value edit (the quoted value held to the call's)",
                            _edits_of("context_lens")),
        site=m.FormattedStringExpression(expression=m.Call(func=m.Name("int"), args=[m.Arg(m.Subscript(
            value=m.Name("lens")))])),
        mutate=lambda node: node.with_changes(expression=_expr("int(live[b])")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="table-error-names-the-table-width-as-num-blocks",
        description="the block_table error names the table's width as num_blocks (dims.max_blocks for"
                    " dims.num_blocks): on a pool of 8 blocks and a table of 5 columns, ids 5 to 7 are accepted,"
                    " yet the message says they must lie in [0, num_blocks=5)",
        exposed_by=Exposure("a block_table value edit on a pool of another size than the table's width (the"
                            " named bound held to the call's)",
                            _edits_of("block_table")),
        site=m.FormattedStringExpression(expression=m.Attribute(value=m.Name("dims"), attr=m.Name("num_blocks"))),
        mutate=lambda node: node.with_changes(expression=_expr("dims.max_blocks")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="zero-last-stride-accepted",
        description="the unit-stride check of a tensor whose rows may stride also takes a last stride of 0,"
                    " meant for shared rows but on the wrong axis: a table row that is one id repeated passes",
        exposed_by=Exposure("a block table or out whose last dimension is expanded (an input edit)",
                            _edit("block_table-last-dim-expanded", "out-last-dim-expanded")),
        site=m.Comparison(left=m.Call(func=m.Attribute(value=m.Name("tensor"), attr=m.Name("stride")))),
        mutate=_replace_with("tensor.stride(-1) in (0, 1)"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="stages-capped-at-the-defaults",
        description="a caller's num_stages capped at the deepest default (7): a deeper pipeline, which the"
                    " kernel runs, is rejected",
        exposed_by=Exposure("num_stages deeper than any default (an input edit)",
                            _edit("num_stages-deeper-than-the-defaults")),
        site=m.UnaryOperation(operator=m.Not(), expression=m.Call(
            func=m.Name("_positive_int"), args=[m.Arg(m.Name("num_stages"))])),
        mutate=_replace_with("not _positive_int(num_stages) or num_stages > 7"),
        path=TUNING,
        side=HOST,
    ),
    Bug(
        name="heads-capped-at-one-mma",
        description="H capped at 256, one warp-group MMA's widest N: 512 heads, which the kernel runs as"
                    " several MMAs, are rejected",
        exposed_by=Exposure("more than 256 heads", _logits(lambda c: c.heads > 256)),
        site=m.Comparison(left=m.BinaryOperation(left=m.Name("heads"), operator=m.BitAnd())),
        mutate=_replace_with("heads & (heads - 1) != 0 or heads > 256"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="key-scales-floored",
        description="the key scales floored at 1e-12, the quantizer's floor on amax taken for one on the"
                    " scale: every positive scale is valid, and a cache of small keys comes out wrong",
        exposed_by=Exposure("key scales 2**40 times smaller", _logits(lambda c: c.values == "tiny")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("scales"))]),
        mutate=lambda node: node.with_changes(value=_expr("tl.maximum(tl.load(scale_ptrs), 1e-12)")),
    ),
    Bug(
        name="max-model-len-any-integer-like",
        description="max_model_len checked as integer-like (__index__), not as an int: a numpy int passes"
                    " the check and fails inside the launch, after out is allocated",
        exposed_by=Exposure("max_model_len as a numpy int or a tensor (an input edit)",
                            _edit("max_model_len-numpy-int", "max_model_len-tensor")),
        site=m.UnaryOperation(operator=m.Not(), expression=m.Call(
            func=m.Name("isinstance"), args=[m.Arg(m.Name("max_model_len")), m.Arg(m.Name("int"))])),
        mutate=_replace_with('not hasattr(max_model_len, "__index__")'),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="heads-a-multiple-of-16",
        description="H checked as a power of two or a multiple of 16 (another backend's rule): 48 heads pass"
                    " and the kernel's query-row range is no power of two",
        exposed_by=Exposure("48 heads (an input edit)", _edit("q-heads-multiple-of-16-not-power-of-two")),
        site=m.Comparison(left=m.BinaryOperation(left=m.Name("heads"), operator=m.BitAnd())),
        mutate=_replace_with("heads % 16 != 0 and heads & (heads - 1) != 0"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="devices-checked-only-with-out",
        description="the one-device check runs only when the caller passes out (moved under the out checks):"
                    " a cache on another device with the op's own out reaches the launch unchecked",
        exposed_by=Exposure("a tensor on another device, the op allocating out (an input edit)",
                            _edit("kv_cache-other-device", "q-other-device", "weights-other-device",
                                  "context_lens-other-device", "block_table-other-device")),
        site=_call_named("_check_one_device"),
        mutate=lambda node: _expr(f"(None if out is None else {_code(node)})"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="out-shape-checked-only-with-next-n-lens",
        description="the out shape check sits under the next_n_lens branch: a caller's out of the wrong"
                    " shape passes when every next_n slot is live (next_n_lens=None)",
        exposed_by=Exposure("an out of the wrong shape on a base without next_n_lens (an input edit)",
                            lambda case: _edit("out-rows-short", "out-rows-long", "out-columns-short",
                                               "out-columns-long")(case) and case.base == "small-uniform"),
        site=m.BooleanOperation(left=m.Comparison(comparisons=[m.ComparisonTarget(operator=m.IsNot())]),
                                right=_names("out", "batch", "next_n", "max_model_len")),
        mutate=lambda node: node.with_changes(left=_expr("out is not None and next_n_lens is not None")),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="narrow-tile-copies-folded-across-tokens-at-one-slot",
        description="at one slot a program the copies of a narrow tile are folded as [BLOCK_N, TILE_REPEAT]:"
                    " each logit becomes the largest of two or four neighbouring tokens'",
        exposed_by=Exposure("a tile narrower than 64 tokens with one slot a program",
                            _logits(lambda c: _tile(c) < 64 and _slots(c) == 1)),
        site=m.Assign(targets=[m.AssignTarget(m.Name("logits"))], value=_call("max")),
        mutate=lambda node: node.with_changes(value=_expr(
            "tl.max(tl.reshape(logits, (BLOCK_N, TILE_REPEAT, SLOT_GROUP)), axis=1) if SLOT_GROUP == 1"
            f" else {_code(node.value)}")),
    ),
    Bug(
        name="narrow-tile-copies-averaged",
        description="the copies of a narrow tile (repeated to fill the MMA's 64 rows) combined by their mean,"
                    " not their max: the same logits, unless two copies of a pre-scale logit overflow float32"
                    " when added",
        exposed_by=Exposure("a tile narrower than 64 tokens with pre-scale logits near float32's maximum",
                            _logits(lambda c: c.values == "weight-heavy" and _tile(c) < 64)),
        site=_call("max") & m.Call(args=[m.Arg(_call("reshape")), m.Arg()]),
        mutate=lambda node: _expr(f"tl.sum({_code(node.args[0].value)}, axis=0) / TILE_REPEAT"),
    ),
    Bug(
        name="one-token-block-scales-in-32-bit-float-units",
        description="a gather of its own for one-token blocks addresses each scale as the block's last float"
                    " from the cache's start, the block offset in 32 bits: right in any pool below 8 GiB, wrapped"
                    " past it",
        exposed_by=Exposure("one-token blocks in a pool over 8 GiB",
                            _logits(lambda c: c.kv_block == 1 and c.pool == "over-8gib")),
        site=_TOKEN_SCALE_POINTERS,
        mutate=lambda node: node.with_changes(value=_expr(
            "kv_ptr.to(tl.pointer_type(tl.float32)) + block_id * (BLOCK_BYTES // 4) + HEAD_DIM // 4"
            f" if KV_BLOCK == 1 else {_code(node.value)}")),
    ),
    Bug(
        name="scales-folded-into-the-weights-at-one-row",
        description="at next_n 1 each token's scale is folded into the head weights before the head sum (and"
                    " taken out after): the same logits, unless a scale times a weight passes float32's maximum"
                    " where every logit is ordinary",
        exposed_by=Exposure("one query row with head weights and key scales whose product overflows",
                            _logits(lambda c: c.next_n == 1 and c.values == "product-heavy")),
        site=_WEIGHTED_SCORES,
        mutate=lambda node: node.with_changes(value=_expr(
            f"tl.maximum(scores, 0.0) * (head_weights[None, :] * {_TILE_SCALES}) / {_TILE_SCALES} if NEXT_N == 1"
            f" else {_code(node.value)}")),
    ),
    Bug(
        name="fill-skipped-where-the-context-reaches-max-model-len",
        description="the -inf fill loop skipped for a sequence whose context reaches max_model_len (\"nothing"
                    " past it to fill\"): a slot group with no live row has no context tiles, and its rows are"
                    " left unwritten",
        exposed_by=Exposure("a sequence at max_model_len beside a slot group with no live row",
                            _logits(lambda c: c.context == "max-len" and c.dead_slot_group())),
        site=_FILL_LOOP_RANGE,
        mutate=lambda node: node.with_changes(args=[
            node.args[0], cst.Arg(_expr("tl.where(context_len < max_model_len, fill_end, fill_begin)"))]),
    ),
    Bug(
        name="one-sequence-table-checked-a-column-past",
        description="a batch of one counts its used blocks as ctx // KVB + 1, which for a context of whole"
                    " blocks checks one unused column: a valid call whose spare entry holds any id is refused",
        exposed_by=Exposure("one sequence whose context is whole blocks, beside spare table columns",
                            _logits(lambda c: c.batch == 1 and c.table == "spare" and c.kv_block > 1
                                    and c.context_lens()[0] % c.kv_block == 0)),
        site=_USED_BLOCKS,
        mutate=lambda node: _expr("(lens[:, None] + (dims.kv_block if dims.batch == 1 else dims.kv_block - 1))"
                                  " // dims.kv_block"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="key-loads-marked-to-leave-l2-first",
        description="the key tile's load marked evict_first (\"each tile is read once\"): the slot groups and"
                    " splits that read the same tile next find it gone from the L2; every value the same",
        exposed_by=Exposure("the kernel's cover compiled for sm_90 (the compiled-code case)", _compiled("cover")),
        site=_call("load") & m.Call(args=[m.Arg(m.Name("key_ptrs"))]),
        mutate=lambda node: _with_keyword_arg(node, "eviction_policy", _expr('"evict_first"')),
    ),
    Bug(
        name="key-loop-as-a-plain-range",
        description="the key loop as a plain range (\"the compiler pipelines loops anyway\"): the launcher's"
                    " stage count is dropped, no tile is loaded ahead; every value the same, 6-30% slower on a GPU",
        exposed_by=Exposure("the key loop compiled for sm_90 at 1, 3 and 6 stages (the compiled-code case)",
                            _compiled("pipeline-depth")),
        site=_call("range") & m.Call(args=[m.Arg(m.Name("tile_begin")), m.Arg(m.Name("tile_end")), m.ZeroOrMore()]),
        mutate=_replace_with("range(tile_begin, tile_end)"),
    ),
    Bug(
        name="key-loop-shallower-for-wide-programs",
        description="the key loop's stages capped at 3 for programs of more than 64 query rows (\"a 128-row"
                    " accumulator with six stages spills\"): the decode with a draft token (64 heads, next_n 2)"
                    " loads fewer tiles ahead; every value, and every program of 64 rows or fewer, the same",
        exposed_by=Exposure("the key loop compiled for sm_90 at 1, 3 and 6 stages in a program of 128 query rows"
                            " (the compiled-code case)", _compiled("pipeline-depth")),
        site=_call("range") & m.Call(args=[m.Arg(m.Name("tile_begin")), m.Arg(m.Name("tile_end")),
                                           m.Arg(keyword=m.Name("num_stages"))]),
        mutate=_replace_with("tl.range(tile_begin, tile_end,"
                             " num_stages=NUM_STAGES if ROWS <= 64 else min(NUM_STAGES, 3))"),
    ),
    Bug(
        name="head-sum-in-halves-on-wide-tables",
        description="the head sum as two half sums where the block table holds 4,096 tokens or more (\"two short"
                    " dependency chains overlap a long context's loads better\"): engines size the table for the"
                    " batch's longest sequence, so a short request's logits change bits when a long one joins it;"
                    " every value within any tolerance",
        exposed_by=Exposure("a sequence called alone with a table of 2**17 tokens, at 4 heads or more (every other"
                            " logits case, by seed)", _logits(lambda c: c.heads >= 4 and c.seed % 2 == 1)),
        site=_HEAD_SUM,
        mutate=_head_sum_in_halves_when("stride_table * KV_BLOCK >= 4096"),
    ),
    Bug(
        name="head-sum-in-halves-on-large-batches",
        description="the head sum as two half sums in batches of 32 sequences or more (\"throughput-bound: more"
                    " independent adds\"), chosen at run time so a drifting batch compiles one kernel: a"
                    " request's logits change bits as the batch around it grows past 32; every value within any"
                    " tolerance",
        exposed_by=Exposure("a batch of 32 or more at 4 heads or more, a sequence of it called alone (every"
                            " logits case calls one)", _logits(lambda c: c.batch >= 32 and c.heads >= 4)),
        site=_HEAD_SUM,
        mutate=_head_sum_in_halves_when("tl.num_programs(0) // GROUPS >= 32"),
    ),
    Bug(
        name="head-sum-in-halves-on-full-batches",
        description="the head sum as two half sums in batches of 64 sequences or more (\"a full batch is bound by"
                    " its key loads: more independent adds\"), chosen at run time so a drifting batch compiles one"
                    " kernel: a request's logits change bits as the batch around it fills; every value within any"
                    " tolerance, and past every logits case's batch (40 at most)",
        exposed_by=Exposure("a valid batch of many sequences, its held sequences called alone (an input edit)",
                            lambda case: _edit("unchanged")(case) and case.base == "many-sequences"),
        site=_HEAD_SUM,
        mutate=_head_sum_in_halves_when("tl.num_programs(0) // GROUPS >= 64"),
    ),
    Bug(
        name="one-hot-head-sum-below-16-heads",
        description="below 16 heads a slot, each slot's heads summed through a one-hot mask over the program's"
                    " rows (\"a reshape to so narrow an inner dimension converts the layout through shared"
                    " memory\"): 0 times a NaN is NaN, so one NaN head weight or a padded row's NaN spreads to"
                    " every slot's logits; on ordinary data every value within the gate",
        exposed_by=Exposure("a NaN head weight or an engine's padded batch at fewer than 16 heads",
                            _logits(lambda c: c.heads < 16 and c.values in ("nan-weight", "engine-padded"))),
        site=_HEAD_SUM,
        mutate=lambda node: cst.parse_statement(
            "if HEADS < 16:\n"
            "    row_of_slot = (offs_r // HEADS)[:, None] == tl.arange(0, SLOT_GROUP)[None, :]\n"
            "    logits = tl.sum(scores[:, :, None] * row_of_slot.to(tl.float32)[None, :, :], axis=1)\n"
            "else:\n"
            "    logits = tl.sum(tl.reshape(scores, (TILE_REPEAT * BLOCK_N, SLOT_GROUP, HEADS)), axis=2)\n"),
    ),
    Bug(
        name="one-slot-query-tile-base-in-int32",
        description="programs of one next_n slot read their query tile from a base pointer, the sequence's row"
                    " times HEADS * HEAD_DIM computed in int32 (\"one contiguous tile: a dense offset the"
                    " compiler vectorizes\"): past 2**31 elements of q the offset wraps and the program reads"
                    " another sequence's queries",
        exposed_by=Exposure("a q past int32 elements at one slot a program (an input edit)",
                            lambda case: _edit("q-rows-past-int32-elements")(case) and case.base == "wide-rows-one-slot"),
        site=_Q_POINTERS,
        mutate=lambda node: cst.parse_statement(
            "if SLOT_GROUP == 1:\n"
            "    q_ptrs = q_ptr + (pid_b * NEXT_N + first_slot) * (HEADS * HEAD_DIM) + (offs_r[:, None] * HEAD_DIM"
            " + offs_d[None, :])\n"
            "else:\n"
            "    q_ptrs = q_ptr + q_rows.to(tl.int64)[:, None] * HEAD_DIM + offs_d[None, :]\n"),
    ),
    Bug(
        name="table-unchecked-past-2**26-entries",
        description="the block-table check is skipped for a table past 2**26 entries (\"a table this large costs"
                    " more to copy and scan than the launch\"): a bad id a sequence uses passes under validate=True"
                    " and the kernel reads outside the cache",
        exposed_by=Exposure("a bad id in the last sequence's row of a table past a serving table's size (an input"
                            " edit)", _edit("block_table-num-blocks-in-last-used-column-past-a-serving-table")),
        site=m.SimpleStatementLine(body=[_TABLE_COPY]),
        mutate=lambda node: cst.parse_statement(
            f"if dims.batch * dims.max_blocks <= 2**26:\n    {_code(node.body[0])}\nelse:\n    return\n"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="next-grid-let-start-by-the-first-split-only",
        description="only the programs of the first split let the next grid start (\"one signal is enough\"):"
                    " the next kernel's programs then wait for every other program to end; every value the same",
        exposed_by=Exposure("the kernel's cover compiled for sm_90 as a dependent launch (the compiled-code case)",
                            _compiled("cover")),
        site=m.SimpleStatementLine(body=[m.Expr(value=m.Call(func=m.Attribute(attr=m.Name("gdc_launch_dependents"))))]),
        mutate=lambda node: cst.parse_statement("if tl.program_id(1) == 0:\n    tl.extra.cuda.gdc_launch_dependents()\n"),
    ),
    Bug(
        name="slot-groups-spread-over-the-grid",
        description="a program's sequence and slot group taken with the sequences fastest (\"spread a sequence's"
                    " groups over the SMs\"): the groups that read the same key tiles are a batch apart in the"
                    " grid and each reads them from memory again; every value and every program's work the same",
        exposed_by=Exposure("slot-grouped calls, the sequence each program reads observed in launch order (the"
                            " schedule case)", _schedule("slot-groups-neighbours")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("first_slot"))]),
        mutate=_replace_with_statement(
            "pid_b, first_slot = tl.program_id(0) % (tl.num_programs(0) // GROUPS),"
            " tl.program_id(0) // (tl.num_programs(0) // GROUPS) * SLOT_GROUP"),
    ),
    Bug(
        name="device-switch-left-when-the-launch-raises",
        description="the launch's device switched by hand around the launch (\"no context manager on the hot"
                    " path\"), left only when the launch returns: a launch that raises leaves the tensors' GPU"
                    " current for the caller's later allocations, streams and graphs",
        exposed_by=Exposure("an unchecked GPU call whose launch raises", _call_cost(lambda case: case.launch_raises)),
        site=m.With(items=[m.WithItem(item=m.Name("on_device"))]),
        mutate=lambda node: cst.parse_statement(
            "on_device.__enter__(); _paged_mqa_logits_kernel[self.grid](*self.args, **self.constexprs, **self.options);"
            " on_device.__exit__(None, None, None)\n"),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="host-lengths-left-out-of-the-device-check",
        description="context_lens on the host left out of the device check (\"engines keep seq_lens on the"
                    " CPU\"): on a GPU a call with host lengths is accepted, and its kernel reads a host address",
        exposed_by=Exposure("context_lens on another device (an input edit; on the CPU also planned with the other"
                            " tensors on a GPU and the lengths on the host)", _edit("context_lens-other-device")),
        site=m.Assign(targets=[m.AssignTarget(m.Name("devices"))]),
        mutate=_replace_with_statement(
            "devices = {name: t.device for name, t in tensors.items()"
            " if t is not None and not (name == 'context_lens' and t.device.type == 'cpu')}"),
        path=VALIDATION,
        side=HOST,
    ),
    Bug(
        name="sm-count-of-the-default-cuda-device",
        description="the split policy asks the SM count of torch.device(\"cuda\") (\"the GPU we run on\"): the"
                    " current GPU's, so on a host of unlike GPUs a call on another is split for the wrong one",
        exposed_by=Exposure("calls on either GPU of a host of two unlike ones (the multi-gpu case)",
                            lambda case: isinstance(case, MultiGpuCase) and case.check == "own-sm-count"),
        site=m.Call(func=m.Name("device_sms"), args=[m.Arg(m.Attribute(value=m.Name("q"), attr=m.Name("device")))]),
        mutate=_replace_with('device_sms(torch.device("cuda") if q.device.type == "cuda" else q.device)'),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="fill-store-hint-dropped",
        description="the -inf fill's store without its evict_first hint (a merge kept the rewritten fill loop of"
                    " one side): lines nobody reads back crowd the key tiles the other groups and splits re-read"
                    " out of the L2; every value the same",
        exposed_by=Exposure("the kernel's cover compiled for sm_90, its stores by hint (the compiled-code case)",
                            _compiled("cover")),
        site=_call("store") & m.Call(args=[m.ZeroOrMore(), m.Arg(keyword=m.Name("eviction_policy"))]),
        mutate=lambda node: node.with_changes(args=[*node.args[:-2], node.args[-2].with_changes(
            comma=cst.MaybeSentinel.DEFAULT)]),
    ),
    Bug(
        name="logits-store-marked-evict-first",
        description="the logits' store marked evict_first like the fill's (\"the result is written once\"): the"
                    " next kernel, the top-k, reads the logits from memory instead of the L2; every value the same",
        exposed_by=Exposure("the kernel's cover compiled for sm_90, its stores by hint (the compiled-code case)",
                            _compiled("cover")),
        site=_call("store") & m.Call(args=[m.DoNotCare(), m.Arg(m.Name("logits")), m.ZeroOrMore()]),
        mutate=lambda node: _with_keyword_arg(node, "eviction_policy", _expr('"evict_first"')),
    ),
    Bug(
        name="fresh-result-rows-padded-on-a-gpu",
        description="on a GPU the op's own result has its rows padded to 16 bytes (\"every row's stores"
                    " vectorize\"): the right values in a strided tensor, not the dense [rows, max_model_len] one;"
                    " views of it raise, on the GPU only",
        exposed_by=Exposure("a fresh result of a GPU call whose max_model_len is no multiple of 4 (the call-cost"
                            " case)", lambda case: isinstance(case, CallCostCase) and not case.caller_out),
        site=m.Assign(targets=[m.AssignTarget(m.Name("out"))],
                      value=m.Call(func=m.Attribute(value=m.Name("torch"), attr=m.Name("empty")))),
        mutate=lambda node: node.with_changes(value=_expr(
            "torch.empty_strided((dims.batch * dims.next_n, max_model_len), (-(-max_model_len // 4) * 4, 1),"
            " dtype=torch.float32, device=q.device) if q.device.type == \"cuda\" else " + cst.Module([]).code_for_node(
                node.value))),
        path=LAUNCHER,
        side=HOST,
    ),
    Bug(
        name="values-checked-after-the-gpu-launch",
        description="on a GPU the op launches on the structural checks and checks the lengths and block ids"
                    " afterwards (\"the value checks' host sync overlaps the kernel\"): a bad block id is read"
                    " out of bounds and the caller's out written before the ValueError; host calls unchanged",
        exposed_by=Exposure("a value rejection called on tensors a GPU holds (the claimed-GPU call of the op)",
                            lambda case: isinstance(case, RejectionCase) and case.edit in _VALUE_REJECTIONS),
        site=m.FunctionDef(name=m.Name("fp8_paged_mqa_logits")),
        mutate=_values_checked_after_the_launch,
        path=LAUNCHER,
        side=HOST,
    ),
)


def _mutated_source(source: str, module: cst.Module, site: cst.CSTNode, replacement: cst.CSTNode,
                    text: tuple[int, int, str, str]) -> str:
    """The file's source with ``site`` replaced. A site and a replacement on one line each are
    spliced into the text (what libcst would render: an expression's code does not depend on
    its block); any other goes through libcst, which re-renders the whole module."""
    line, column, before, after = text
    if "\n" in before or "\n" in after:
        return module.deep_replace(site, replacement).code
    start = sum(len(earlier) + 1 for earlier in source.split("\n")[:line - 1]) + column
    assert source[start:start + len(before)] == before
    return source[:start] + after + source[start + len(before):]


def _site_text(source: str, span, code: str) -> tuple[int, int, str]:
    """(line, column, text) of a site in the file's own text: from the first line of the node's
    code (a statement's span starts at its indent and blank lines), to the span's end. A site
    over several lines keeps its continuation lines' indent, which the node's code alone,
    rendered outside its block, drops."""
    lines = source.split("\n")[span.start.line - 1:span.end.line]
    lines[-1] = lines[-1][:span.end.column]
    lines[0] = lines[0][span.start.column:]
    text = "\n".join(lines)
    skipped = text[:text.index(code.split("\n", 1)[0])]
    line = span.start.line + skipped.count("\n")
    column = len(skipped) - (skipped.rindex("\n") + 1) if "\n" in skipped else span.start.column + len(skipped)
    return line, column, text[len(skipped):]


def _sites(module: cst.Module, bugs: list[Bug], scope: Scope) -> dict[str, list[cst.CSTNode]]:
    """Per bug name, the nodes matching its site in the code ``scope`` covers, outermost
    first: one walk of the module for all of ``bugs``."""
    found = {bug.name: [] for bug in bugs}
    by_type: dict[type | None, list[Bug]] = {}
    for bug in bugs:
        by_type.setdefault(_node_type(bug.site), []).append(bug)
    anywhere = by_type.pop(None, [])

    class Find(m.MatcherDecoratableVisitor):
        def __init__(self):
            super().__init__()
            self.tracker = ScopeTracker(scope)

        def on_visit(self, node: cst.CSTNode) -> bool:
            self.tracker.enter(node)
            if self.tracker.inside:
                for bug in by_type.get(type(node), []) + anywhere:
                    if m.matches(node, bug.site):
                        found[bug.name].append(node)
            return super().on_visit(node)

        def on_leave(self, original_node: cst.CSTNode) -> None:
            self.tracker.leave(original_node)
            super().on_leave(original_node)

    module.visit(Find())
    return found


def _node_type(matcher) -> type | None:
    """The libcst node class every node ``matcher`` matches is an instance of, where it names
    one (``m.Call`` -> ``cst.Call``; an ``&`` of matchers, its first that names one); else None."""
    if isinstance(matcher, m.AllOf):
        return next((t for t in map(_node_type, matcher.options) if t is not None), None)
    node_type = getattr(cst, type(matcher).__name__, None)
    return node_type if isinstance(node_type, type) and issubclass(node_type, cst.CSTNode) else None


def catalog_mutants(root: Path = PROJECT_ROOT, catalog: tuple[Bug, ...] = CATALOG,
                    target: Target = TRITON_TARGET) -> list[Mutant]:
    """One mutant per bug, in catalog order; CatalogError when a bug's site is missing or
    ambiguous, or lies in code the target does not mutate. Each file is parsed once, and
    walked once per side for the sites of all its bugs."""
    scopes = {}
    for bug in catalog:
        try:
            scopes[bug.name] = target.scope(bug.path, bug.side)
        except LookupError as error:
            raise CatalogError(f"catalog bug {bug.name!r}: {error}") from None
    sources = {path: read_source(path, root) for path in dict.fromkeys(bug.path for bug in catalog)}
    wrappers = {path: MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
                for path, source in sources.items()}
    sites = {}
    for path, side in dict.fromkeys((bug.path, bug.side) for bug in catalog):
        bugs = [bug for bug in catalog if (bug.path, bug.side) == (path, side)]
        sites.update(_sites(wrappers[path].module, bugs, scopes[bugs[0].name]))
    mutants = []
    for bug in catalog:
        wrapper = wrappers[bug.path]
        module = wrapper.module
        if len(sites[bug.name]) != 1:
            lines = wrapper.resolve(PositionProvider)
            where = ", ".join(f"line {lines[s].start.line}" for s in sites[bug.name]) or "nowhere"
            raise CatalogError(f"catalog bug {bug.name!r} must match exactly one site in the {bug.side} code"
                               f" of {bug.path}; matched {where}")
        site = sites[bug.name][0]
        replacement = bug.mutate(site)
        after = module.code_for_node(replacement)
        # the whitespace-inclusive span counts the site's own parentheses
        line, column, before = _site_text(sources[bug.path], wrapper.resolve(WhitespaceInclusivePositionProvider)[site],
                                          module.code_for_node(site))
        mutants.append(Mutant(
            id=bug.name,
            origin="catalog",
            path=bug.path,
            line=line,
            column=column,
            before=before,
            after=after,
            description=bug.description,
            exposed_by=bug.exposed_by.text,
            source=_mutated_source(sources[bug.path], module, site, replacement, (line, column, before, after)),
            side=bug.side,
        ))
    return mutants
