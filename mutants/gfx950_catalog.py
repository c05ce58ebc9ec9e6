"""The bug catalog of the FlyDSL gfx950 kernel (``kernel/flydsl_gfx950.py``): the bugs of the
Triton kernel's catalog at their FlyDSL sites, and those of its own structure (waves sharing a
tile, the two 16-byte halves of a lane's channels, the cross-lane head sum).

Each bug's exposure is a test of a ``Gfx950Case``. The wave-offset bug, the seed kernel's own
(``wave * N_TILES_PER_WAVE`` became ``wave * (N_TILES_PER_WAVE - 1)``), is correct at one wave
per program and wrong at every other count: only a multi-wave variant exposes it.
"""

from collections.abc import Callable

import libcst as cst
import libcst.matchers as m

from mutants.catalog import Bug, Exposure, _expr, _names, _replace_with, _with_operator
from mutants.walk import HOST
from kernel.gfx950_config import LANE_GROUPS
from suites.gfx950_cases import Gfx950Case

FLYDSL = "kernel/flydsl_gfx950.py"


def _gfx950(test: Callable[[Gfx950Case], bool]) -> Callable[[object], bool]:
    return lambda case: isinstance(case, Gfx950Case) and test(case)


def _tiles(case: Gfx950Case) -> list[int]:
    return [-(-ctx // case.block_n) for ctx in case.context_lens]


def _spans_blocks_unlike_tiles(case: Gfx950Case) -> bool:
    """Some position's block differs from its tile index: the block size is not the tile width."""
    return case.kv_block != case.block_n and max(case.context_lens) > min(case.kv_block, case.block_n)


def _row_ends_inside_a_context_tile(case: Gfx950Case) -> bool:
    """Some sequence's last context tile runs past ``max_model_len``."""
    return any(tiles * case.block_n > case.max_model_len for tiles in _tiles(case))


def _ragged_short(case: Gfx950Case) -> bool:
    return case.next_n_lens is not None and min(case.next_n_lens) < case.next_n


def _bug(name: str, description: str, exposed_by: Exposure, site, mutate, side: str | None = None) -> Bug:
    sided = {"side": side} if side else {}
    return Bug(name=name, description=description, exposed_by=exposed_by, site=site, mutate=mutate, path=FLYDSL,
               **sided)


def _binary(left, operator, right) -> m.BinaryOperation:
    return m.BinaryOperation(left=left, operator=operator, right=right)


# the preshuffled layout's token offset: (16-token group) * 16 * D + (row in the group) * 16, in words
_PRESHUFFLE_TOKEN_WORDS = m.Assign(targets=[m.AssignTarget(m.Name("token_words"))],
                                   value=_names("slot", "PRESHUFFLE_TILE", "HEAD_DIM"))


def _scale_folded_into_weights(loop: cst.For) -> cst.For:
    """The token's scale multiplied into each head weight, and no longer into the head sum."""

    class Fold(cst.CSTTransformer):
        def leave_Assign(self, original, updated):
            target = updated.targets[0].target
            if isinstance(target, cst.Name) and target.value == "w":
                return updated.with_changes(value=cst.BinaryOperation(
                    updated.value, cst.Multiply(), _expr("sub_scales[sub]")))
            return updated

        def leave_SimpleStatementLine(self, original, updated):
            if m.matches(updated, m.SimpleStatementLine(body=[m.Assign(
                    targets=[m.AssignTarget(m.Name("logit"))],
                    value=_binary(m.Name("logit"), m.Multiply(), _names("sub_scales")))])):
                return cst.RemoveFromParent()
            return updated

    return loop.visit(Fold())


def _without_keyword(call: cst.Call, keyword: str) -> cst.Call:
    kept = [arg for arg in call.args if arg.keyword is None or arg.keyword.value != keyword]
    return call.with_changes(args=[*kept[:-1], kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)])


# a row's compute loop: its head sum scaled by the token's scale, then summed across lane groups
_ROW_LOOP = m.For(target=m.Name("m"), body=m.IndentedBlock(body=[m.ZeroOrMore(), m.SimpleStatementLine(body=[
    m.Assign(targets=[m.AssignTarget(m.Name("logit"))],
             value=_binary(m.Name("logit"), m.Multiply(), _names("sub_scales")))]), m.ZeroOrMore()]))


def _scale_applied_by_the_storing_group(loop: cst.For) -> cst.For:
    """The token's scale applied, through a list element, only in the lane group that stores the
    row: before the cross-lane sum the other groups' partial sums go in unscaled."""
    scaled_where_stored = [cst.parse_statement(line) for line in (
        "row_logit = [logit]",
        "if stores_row[m]:\n    row_logit[0] = row_logit[0] * sub_scales[sub]\n",
        "logit = row_logit[0]")]

    class Move(cst.CSTTransformer):
        def leave_SimpleStatementLine(self, original, updated):
            if m.matches(updated, m.SimpleStatementLine(body=[m.Assign(
                    targets=[m.AssignTarget(m.Name("logit"))],
                    value=_binary(m.Name("logit"), m.Multiply(), _names("sub_scales")))])):
                return cst.FlattenSentinel(scaled_where_stored)
            return updated

    return loop.visit(Move())


def _head_sum_in_the_store_branch(loop: cst.For) -> cst.For:
    """The cross-lane head sum (and the causal mask) moved into the branch that stores the row:
    there only the storing lane group is active, and its shuffles read the inactive ones."""
    summed = _expr("visible.select(logit + fx.shuffle_xor(logit, MFMA_ROWS, WAVE_SIZE)"
                   " + fx.shuffle_xor(logit, 2 * MFMA_ROWS, WAVE_SIZE)"
                   " + fx.shuffle_xor(logit, 3 * MFMA_ROWS, WAVE_SIZE), float(\"-inf\"))")
    moved = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name("logit"))], value=m.OneOf(
        _binary(m.Name("logit"), m.Add(), m.Call(func=m.Attribute(attr=m.Name("shuffle_xor")))),
        m.Call(func=m.Attribute(value=m.Name("visible"), attr=m.Name("select")))))])

    class Move(cst.CSTTransformer):
        def leave_SimpleStatementLine(self, original, updated):
            return cst.RemoveFromParent() if m.matches(updated, moved) else updated

        def leave_Call(self, original, updated):
            if m.matches(updated, m.Call(func=m.Attribute(attr=m.Name("ptr_store")),
                                         args=[m.Arg(m.Name("logit")), m.ZeroOrMore()])):
                return updated.with_changes(args=[updated.args[0].with_changes(value=summed), *updated.args[1:]])
            return updated

    return loop.visit(Move())


GFX950_CATALOG: tuple[Bug, ...] = (
    _bug("wave-offset",
         "a wave's first sub-tile counted in SUBTILES - 1 sub-tiles per wave: right at one wave per"
         " program, overlapping sub-tiles and unvisited ones at two or more",
         Exposure("num_waves >= 2 (a multi-wave variant)", _gfx950(lambda c: c.num_waves >= 2)),
         _binary(m.Name("wave"), m.Multiply(), m.Name("SUBTILES")),
         lambda node: node.with_changes(right=_expr("(SUBTILES - 1)"))),
    _bug("causal-off-by-one",
         "the causal mask hides the last visible position (< instead of <=)",
         Exposure("any context", _gfx950(lambda c: True)),
         m.Comparison(left=m.Name("offs_p"),
                      comparisons=[m.ComparisonTarget(operator=m.LessThanEqual(), comparator=_names("causal_bounds"))]),
         _with_operator(cst.LessThan())),
    _bug("swapped-layout-strides",
         "preshuffled keys addressed with block-flat token strides",
         Exposure("layout: preshuffle", _gfx950(lambda c: c.preshuffle)),
         m.Assign(targets=[m.AssignTarget(m.Name("token_words"))], value=_names("slot", "PRESHUFFLE_TILE", "HEAD_DIM")),
         lambda node: node.with_changes(value=_expr("slot * HEAD_DIM_WORDS"))),
    _bug("lane-half-flat-stride",
         "the second 16 channels of a lane's 32 read 16 bytes on, as in a token-major row, also in the"
         " preshuffled layout, where they lie one 256-byte sub-tile on",
         Exposure("layout: preshuffle", _gfx950(lambda c: c.preshuffle)),
         m.Assign(targets=[m.AssignTarget(m.Name("SECOND_HALF_WORDS"))]),
         lambda node: node.with_changes(value=_expr("PRESHUFFLE_TILE // WORD_BYTES"))),
    _bug("lane-half-sum",
         "the head sum across lane groups stops after one shuffle: half the heads' relu terms are lost",
         Exposure("any context (every head tile spreads over four lane groups)", _gfx950(lambda c: True)),
         m.Assign(targets=[m.AssignTarget(m.Name("logit"))],
                  value=_binary(m.Name("logit"), m.Add(), m.Call(args=[
                      m.Arg(m.Name("logit")), m.Arg(_binary(m.Integer("2"), m.Multiply(), m.Name("MFMA_ROWS"))),
                      m.ZeroOrMore()]))),
         lambda node: node.with_changes(value=_expr("logit"))),
    _bug("wrong-block-table-index",
         "the block-table column is the tile index, not the block the token lies in",
         Exposure("kv_block != tile width, contexts past the smaller of the two",
                  _gfx950(_spans_blocks_unlike_tiles)),
         _binary(m.Name("offs_t"), m.FloorDivide(), m.Name("KV_BLOCK")),
         _replace_with("tile")),
    _bug("scale-slot",
         "the token's scale read at its slot in the 16-token sub-tile, not in the block",
         Exposure("kv_block other than 16 (a sub-tile is not a block)", _gfx950(lambda c: c.kv_block != 16)),
         _binary(m.Name("SCALE_WORD_OFFSET"), m.Add(), m.Name("slot")),
         lambda node: node.with_changes(right=cst.Name("lane_token"))),
    _bug("dropped-kv-scale",
         "the per-token key scale is never applied",
         Exposure("any context (scales differ per token)", _gfx950(lambda c: True)),
         m.Assign(targets=[m.AssignTarget(m.Name("logit"))],
                  value=_binary(m.Name("logit"), m.Multiply(), _names("sub_scales"))),
         lambda node: node.with_changes(value=_expr("logit"))),
    _bug("wrong-head-weight",
         "every next_n slot takes the head weights of slot 0",
         Exposure("next_n >= 2", _gfx950(lambda c: c.next_n >= 2)),
         m.Subscript(value=m.Name("head_weights")),
         lambda node: node.with_changes(slice=[cst.SubscriptElement(cst.Index(_expr("ht")))])),
    _bug("floor-split",
         "tiles per split rounded down: the last tiles of a sequence are never computed",
         Exposure("splits not dividing the tile count", _gfx950(lambda c: c.splits > 1
                                                               and any(t % c.splits for t in _tiles(c)))),
         m.Assign(targets=[m.AssignTarget(m.Name("tiles_per_split"))]),
         lambda node: node.with_changes(value=_expr("context_tiles // num_splits"))),
    _bug("program-offset-in-tiles",
         "program s starts at tile s instead of s * tiles_per_split",
         Exposure("several tiles per program", _gfx950(lambda c: c.splits > 1
                                                       and max(-(-t // c.splits) for t in _tiles(c)) >= 2)),
         _binary(m.Name("pid_s"), m.Multiply(), m.Name("tiles_per_split")),
         lambda node: node.left),
    _bug("batch-blind-output-row",
         "every sequence writes the output rows of sequence 0",
         Exposure("batch >= 2", _gfx950(lambda c: c.batch >= 2)),
         m.Call(func=m.Attribute(value=m.Name("fx"), attr=m.Name("Int64")), args=[m.Arg(
             _binary(_binary(m.Name("pid_b"), m.Multiply(), m.Name("NEXT_N")), m.Add(), m.Name("m")))]),
         _replace_with("fx.Int64(m)")),
    _bug("next-n-blind-causal-bound",
         "every query row sees the whole context, as if next_n were 1",
         Exposure("next_n >= 2", _gfx950(lambda c: c.next_n >= 2)),
         _binary(_binary(m.Name("context_len"), m.Subtract(), m.Name("live_rows")), m.Add(), m.Name("m")),
         _replace_with("context_len - 1")),
    _bug("ragged-row-bound-off-by-one",
         "the first dead row of a ragged next_n sequence is treated as live",
         Exposure("ragged next_n_lens with a sequence short of next_n", _gfx950(_ragged_short)),
         m.Comparison(left=m.Name("live_rows"),
                      comparisons=[m.ComparisonTarget(operator=m.GreaterThan(), comparator=m.Name("m"))]),
         _with_operator(cst.GreaterThanEqual())),
    _bug("rows-stored-by-their-own-lane-group",
         "row m stored by lane group m, not m % LANE_GROUPS (\"the modulo is a no-op for next_n up to"
         " four\"): past four rows no lane group stores a row",
         Exposure("next_n past the four lane groups", _gfx950(lambda c: c.next_n > LANE_GROUPS)),
         _binary(m.Name("m"), m.Modulo(), m.Name("LANE_GROUPS")),
         _replace_with("m")),
    _bug("tile-width-without-its-subtiles",
         "a tile counted as 16 tokens per wave, its sub-tiles left out (\"BLOCK_N: one MFMA column block per"
         " wave\"): consecutive tiles overlap, every cell computed and stored again; the same values",
         Exposure("more than one sub-tile per wave (each cell is to be stored once)",
                  _gfx950(lambda c: c.subtiles >= 2)),
         m.Assign(targets=[m.AssignTarget(m.Name("BLOCK_N"))]),
         lambda node: node.with_changes(value=_expr("NUM_WAVES * MFMA_ROWS"))),
    _bug("context-store-unbounded-by-max-len",
         "a context tile's logits stored without the max_model_len bound (\"context tiles end at the"
         " context, which max_model_len bounds\"): the last tile's positions past it run into the next row"
         " or past the output",
         Exposure("a row ending inside its sequence's last context tile (max_model_len the longest context)",
                  _gfx950(_row_ends_inside_a_context_tile)),
         m.If(test=_binary(m.Subscript(value=m.Name("stores_row")), m.BitAnd(), m.DoNotCare()),
              body=m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Expr(value=m.Call(
                  args=[m.Arg(m.Name("logit")), m.ZeroOrMore()]))])])),
         lambda node: node.with_changes(test=node.test.left)),
    _bug("table-width-as-row-stride",
         "the launch passes the block table's width as its row stride (\"the table is [B, max_blocks]\"):"
         " right for a table of its own, rows read at the wrong place in a column slice of a wider one",
         Exposure("a block table sliced from a wider one (its row stride is not its width)",
                  _gfx950(lambda c: c.table_margin > 0)),
         m.Call(func=m.Attribute(value=m.Name("block_table"), attr=m.Name("stride"))),
         _replace_with("dims.max_blocks"), side=HOST),
    _bug("preshuffle-channels-of-the-first-k-step",
         "in the preshuffled layout every 128-channel K step reads the channels of the first: right while"
         " D is one K step (128 or less)",
         Exposure("preshuffle with D past one MFMA K step (128)",
                  _gfx950(lambda c: c.preshuffle and c.head_dim > 128)),
         m.Assign(targets=[m.AssignTarget(m.Name("channel_words"))],
                  value=_binary(m.Subscript(value=m.Name("lane_k_words")), m.Multiply(), m.Name("PRESHUFFLE_TILE"))),
         lambda node: node.with_changes(value=_expr("lane_k_words[0] * PRESHUFFLE_TILE"))),
    _bug("preshuffle-group-base-as-a-mask",
         "the preshuffled token's 16-token group taken as slot & 0x30 (\"blocks are 64 tokens\"): right up to"
         " 64-token blocks, the groups past the fourth folded onto the first four",
         Exposure("preshuffle with blocks past 64 tokens", _gfx950(lambda c: c.preshuffle and c.kv_block > 64)),
         _PRESHUFFLE_TOKEN_WORDS,
         lambda node: node.with_changes(value=_expr(
             "((slot & 0x30) * HEAD_DIM + (slot & 0xF) * PRESHUFFLE_TILE) // WORD_BYTES"))),
    _bug("preshuffle-group-stride-in-mfma-k",
         "the preshuffled token's 16-token group strided by the MFMA's 128 channels, not the head dim:"
         " right at D = 128 only",
         Exposure("preshuffle with D other than 128", _gfx950(lambda c: c.preshuffle and c.head_dim != 128)),
         _PRESHUFFLE_TOKEN_WORDS,
         lambda node: node.with_changes(value=_expr(
             "((slot // PRESHUFFLE_TILE) * PRESHUFFLE_TILE * MFMA_K + (slot % PRESHUFFLE_TILE) * PRESHUFFLE_TILE)"
             " // WORD_BYTES"))),
    _bug("kv-scale-folded-into-head-weights",
         "the token's scale multiplied into each head weight before the head sum, not into the sum (\"one"
         " multiply per head, the same value\"): the same in exact arithmetic, but a large scale times a"
         " large weight overflows float32 where the sum times the scale does not",
         Exposure("data whose weights and scales are each near float32's range (product-heavy)",
                  _gfx950(lambda c: c.values == "product-heavy")),
         _ROW_LOOP, _scale_folded_into_weights),
    _bug("rows-past-eight-stored-by-no-lane-group",
         "row m stored by lane group m - 4 past the fourth row (\"next_n is at most 8\"): from the ninth row on"
         " no lane group stores it",
         Exposure("next_n past eight rows (two per lane group)", _gfx950(lambda c: c.next_n > 2 * LANE_GROUPS)),
         _binary(m.Name("m"), m.Modulo(), m.Name("LANE_GROUPS")),
         lambda node: _expr("(m if m < LANE_GROUPS else m - LANE_GROUPS)")),
    _bug("launch-on-the-default-stream",
         "the kernel launched without the caller's stream (\"the launcher's default is fine\"): on the"
         " default stream it is not ordered after the caller's writes of its inputs, nor its output before"
         " the caller's reads",
         Exposure("any call (the caller's stream is always the current one)", _gfx950(lambda c: True)),
         m.Call(func=m.Attribute(attr=m.Name("launch")), args=[m.ZeroOrMore(), m.Arg(keyword=m.Name("stream")),
                                                               m.ZeroOrMore()]),
         lambda node: _without_keyword(node, "stream"), side=HOST),
    _bug("block-offset-in-32-bits",
         "a block's word offset multiplied in 32 bits and widened after (\"the cast is what matters\"): right"
         " in any pool below 2^31 words (8 GiB), wrapped past it",
         Exposure("a block pool past 2^31 words (8 GiB)", _gfx950(lambda c: c.pool_bytes > 8 * 2**30)),
         _binary(m.Call(func=m.Attribute(value=m.Name("fx"), attr=m.Name("Int64")), args=[m.Arg(m.Name("block_id"))]),
                 m.Multiply(), m.Name("BLOCK_WORDS")),
         lambda node: _expr("fx.Int64(block_id * BLOCK_WORDS)")),
    _bug("default-splits-blind-to-the-batch",
         "the default split count sized for the compute units alone (\"programs per CU\"), not shared out"
         " among the batch's sequences: the same values, a grid the batch times too large",
         Exposure("the launcher's default split counts, pinned", _gfx950(lambda c: c.pinned_defaults)),
         m.Assign(targets=[m.AssignTarget(m.Name("wanted"))]),
         lambda node: node.with_changes(value=_expr("PROGRAMS_PER_CU * cus")), side=HOST),
    _bug("device-guard-without-the-architecture",
         "the launcher refuses only tensors off the GPU (\"ROCm builds run on AMD GPUs\"): on an MI300"
         " (gfx942) it launches code compiled for gfx950",
         Exposure("a device of another architecture (the launcher must refuse it)",
                  _gfx950(lambda c: bool(c.device_arch))),
         m.BooleanOperation(left=m.Comparison(left=m.Attribute(value=m.Attribute(value=m.Name("q"),
                                                                                attr=m.Name("device")),
                                                               attr=m.Name("type"))),
                            operator=m.Or()),
         lambda node: node.left, side=HOST),
    _bug("scale-applied-by-the-storing-group-alone",
         "the token's scale applied through a list element in the lane group that stores the row only"
         " (\"only that group's sum is stored\"): the other groups' partial sums join the cross-lane sum"
         " unscaled",
         Exposure("any context (every row's head sum spans four lane groups)", _gfx950(lambda c: True)),
         _ROW_LOOP, _scale_applied_by_the_storing_group),
    _bug("head-sum-inside-the-store-branch",
         "the cross-lane head sum computed inside the branch that stores the row (\"only the storing lane"
         " group needs it\"): there the other three groups are inactive and their shuffled values are not"
         " theirs (ds_bpermute reads 0 from an inactive lane)",
         Exposure("any context (every row's store is one lane group's)", _gfx950(lambda c: True)),
         _ROW_LOOP, _head_sum_in_the_store_branch),
)
