"""Checks of the emulator's primitives, independent of the kernel under test. Importing this
module installs the stand-in flydsl, so the checks run in a process of their own
(``print_checks``, one JSON line each)."""

import json
import traceback

import numpy as np
import torch

from flydsl_emulator import core, fake_flydsl
from flydsl_emulator.core import STATE, EmuError, EmuMemoryError, Val

fake_flydsl.install()
import flydsl.expr as fx  # noqa: E402  (the fake)
from flydsl.expr import rocdl  # noqa: E402


def program(lanes):
    STATE.lanes = lanes
    STATE.block_idx = (0, 0, 0)
    STATE.mask = np.ones(lanes, bool)
    STATE.stack = []


def _fails(call, finding: str, what: str) -> None:
    """``call`` raises an EmuError saying ``finding``; AssertionError naming ``what`` if not."""
    try:
        call()
    except EmuError as exc:
        assert finding in str(exc), exc
    else:
        raise AssertionError(what)


def check_mfma_layout():
    """16 heads x 16 tokens x 128 channels, A and B fed by the documented lane map; lane l gets
    heads 4*(l//16)+r of token l%16. Checked against a float64 matmul of decoded fp8."""
    program(128)  # two waves
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        qa = (torch.randn(2, 16, 128, generator=g) * 4).to(torch.float8_e4m3fn)  # [wave, head, k]
        kb = (torch.randn(2, 16, 128, generator=g) * 4).to(torch.float8_e4m3fn)  # [wave, token, k]
        want = torch.einsum("whk,wtk->wht", qa.double(), kb.double())
        lanes = np.arange(128)
        w, l = lanes // 64, lanes % 64
        words_a = qa.view(torch.uint8).numpy()  # [w, row, k]
        words_b = kb.view(torch.uint8).numpy()
        fa = np.stack([words_a[w[i], l[i] % 16, 32 * (l[i] // 16):32 * (l[i] // 16) + 32] for i in lanes])
        fb = np.stack([words_b[w[i], l[i] % 16, 32 * (l[i] // 16):32 * (l[i] // 16) + 32] for i in lanes])
        a = Val(fa.view(np.int32).astype(np.int64))
        b = Val(fb.view(np.int32).astype(np.int64))
        c = fx.Vector.filled(4, 1.5, fx.Float32)
        got = rocdl.mfma_scale_f32_16x16x128_f8f6f4(("vector", 4, "f32"), [a, b, c, 0, 0, 0, 127, 0, 127]).a
        for i in lanes:
            for r in range(4):
                exp = want[w[i], 4 * (l[i] // 16) + r, l[i] % 16].item() + 1.5
                assert abs(got[i, r] - exp) <= 1e-6 * max(1.0, abs(exp)), (i, r, got[i, r], exp)
        # scale 128 on A doubles the product
        got2 = rocdl.mfma_scale_f32_16x16x128_f8f6f4(("vector", 4, "f32"), [a, b, c, 0, 0, 0, 128, 0, 127]).a
        assert np.allclose(got2 - 1.5, 2 * (got - 1.5), rtol=1e-6, atol=1e-3)


def check_divergent_if_and_merge():
    def body(flag: fx.Int32):
        t = fx.thread_idx.x
        x = t * 0
        row = [t * 0]
        if t % 2 == 1:
            x = t + 100
            row[0] = t + 1000  # an element, merged lane by lane like a name
        else:
            x = x - 1
        y = x
        if fx.const_expr(True):
            y = y + 0
        return y, row[0]

    def grows_a_list(flag: fx.Int32):
        t = fx.thread_idx.x
        rows = []
        if t % 2 == 1:
            rows.append(t)
        return rows

    from flydsl_emulator.transform import divergent_function
    f = divergent_function(body, fake_flydsl.HELPERS)
    program(8)
    y, element = f(fx.Int32(0))
    assert list(y.a) == [-1, 101, -1, 103, -1, 105, -1, 107], y.a
    assert list(element.a) == [0, 1001, 0, 1003, 0, 1005, 0, 1007], element.a
    assert f.__emu_divergent_ifs__ == 1
    _fails(lambda: divergent_function(grows_a_list, fake_flydsl.HELPERS)(fx.Int32(0)),
           "cannot differ from lane to lane", "a list grown under a divergent if not caught")


def check_bounds_and_strided_out():
    program(4)
    base = torch.full((2, 6), float("nan"))
    out = base[:, :4]  # a caller's strided view: 2 guard columns a row
    buf = core.Buffer("out", out)
    ptr = core.Ptr(buf, 0, np.float32)
    core.store(Val(np.array([1, 2, 3, 4], np.float32)), ptr + Val(np.array([0, 1, 6, 9])))
    assert base[0, :2].tolist() == [1, 2] and base[1, 0] == 3 and base[1, 3] == 4
    for bad in ([4, 0, 0, 0], [0, 0, 0, 12], [-1, 0, 0, 0]):  # a guard column, past the end, before
        try:
            core.store(Val(np.zeros(4, np.float32)), ptr + Val(np.array(bad)))
        except EmuMemoryError as exc:
            assert "'out'" in str(exc)
        else:
            raise AssertionError(f"store to {bad} not caught")
    # a masked-off lane may hold any address
    STATE.mask = np.array([True, False, True, True])
    core.store(Val(np.zeros(4, np.float32)), ptr + Val(np.array([0, 99, 1, 2])))
    program(4)
    # a load's bounds
    t = torch.arange(10, dtype=torch.int32)
    lp = core.Ptr(core.Buffer("lens", t), 0, np.int32)
    assert list(core.load(lp + Val(np.array([0, 3, 6, 9]))).a) == [0, 3, 6, 9]
    try:
        core.load(lp + Val(np.array([7, 8, 9, 10])), 1)
    except EmuMemoryError as exc:
        assert "'lens'" in str(exc)
    else:
        raise AssertionError("load past the end not caught")
    try:
        core.load(lp + Val(np.array([7, 7, 7, 7])), 4)  # a vector load running past the end
    except EmuMemoryError:
        pass
    else:
        raise AssertionError("vector load past the end not caught")


def check_race_and_shuffle():
    program(64)
    v = Val(np.arange(64, dtype=np.float32))
    assert list(core.shuffle_xor(v, 16, 64).a[:4]) == [16, 17, 18, 19]
    assert list(core.shuffle_xor(v, 32, 64).a[32:34]) == [0, 1]
    with core.masked(Val(np.arange(64) < 16)):  # lanes 16-63 inactive: a shuffle reading them fails
        assert list(core.shuffle_xor(v, 1, 64).a[:2]) == [1, 0]
        _fails(lambda: core.shuffle_xor(v, 16, 64), "inactive", "a shuffle from inactive lanes not caught")
    _fails(lambda: core.shuffle_xor(v, 64, 128),
           "a wave reads only its own lanes", "a shuffle across waves not caught")
    buf = core.Buffer("out", torch.zeros(4))
    _fails(lambda: core.store(v, core.Ptr(buf, 0, np.float32) + (fx.thread_idx.x % 2)),
           "race", "write race not caught")


def check_int_semantics():
    program(4)
    a = Val(np.array([-7, 7, -1, 5]))
    assert list((a // 2).a) == [-4, 3, -1, 2]  # floordivsi
    assert list((a % 2).a) == [-1, 1, -1, 1]  # remsi
    assert list(fx.Int32(Val(np.array([2**31, -2**31 - 1, 3, 4]))).a) == [-2**31, 2**31 - 1, 3, 4]
    try:
        range(Val(np.array([0, 1, 0, 0])))
    except EmuError:
        pass
    else:
        raise AssertionError("lane-varying range bound not caught")


def check_integer_widths():
    """i32 values (ids, Int32 casts and arguments, their arithmetic with Python ints that fit)
    compute in 32 bits and wrap; an i64 operand, or a constant past 32 bits, makes the op i64."""
    from flydsl_emulator.transform import divergent_function

    program(4)
    t = fx.thread_idx.x
    assert t.a.dtype == np.int32 and fx.block_idx.x.a.dtype == np.int32
    x = t + 46341  # 46341^2 > 2^31
    assert x.a.dtype == np.int32
    assert list((x * x).a) == [wrap(v * v) for v in range(46341, 46345)]
    assert list((fx.Int64(x) * x).a) == [v * v for v in range(46341, 46345)]
    assert (fx.Int64(x) * x).a.dtype == np.int64
    assert (x * 65536).a.dtype == np.int32 and (x * 2**32).a.dtype == np.int64  # the constant's own type
    assert list(fx.Int32(fx.Int64(x) * x).a) == list((x * x).a)  # trunci
    assert list((-fx.Int32(-2**31)).a) == [-2**31] * 4 and list((fx.Int32(2**31 - 1) + 1).a) == [-2**31] * 4
    assert list(fx.Int64(fx.Int32(-5)).a) == [-5] * 4  # sign-extended
    assert list(fx.Int32(2**32 + 7).a) == [7] * 4
    # comparisons, select, min/max in the common type
    assert list((x * x < 0).a) == [True] * 4
    s = (t < 2).select(x, -1)
    assert s.a.dtype == np.int32 and list(s.a) == [46341, 46342, -1, -1]
    assert (t < 2).select(fx.Int64(x), -1).a.dtype == np.int64
    assert fx.min(x, fx.Int64(t)).a.dtype == np.int64 and list(fx.max(t, 2).a) == [2, 2, 2, 3]
    f = (t < 2).select(fx.Float32(1.5), float("-inf"))
    assert f.a.dtype == np.float32 and list(f.a) == [1.5, 1.5, -np.inf, -np.inf]
    assert (t * 0.5).a.dtype == np.float32 and (t / 2).a.dtype == np.float32
    assert ((t < 2) & (t > 0)).a.dtype == np.bool_ and ((t < 2) + 1).a.dtype == np.int32
    for bad in (lambda: fx.Int64(t) * 0.5, lambda: t & 1.0):
        try:
            bad()
        except EmuError:
            pass
        else:
            raise AssertionError("an op FlyDSL refuses or types f64 passed")
    # addressing: a wrapped offset stays wrapped (out of bounds), an Int64 one is exact
    buf = core.Buffer("kv", torch.zeros(16, dtype=torch.int32))
    ptr = core.Ptr(buf, 0, np.int32)
    assert list(fx.ptr_load(ptr + (fx.Int32(65536) * 65536 + t)).a) == [0] * 4  # 2^32 wraps to 0
    try:
        fx.ptr_load(ptr + (fx.Int64(65536) * 65536 + t))
    except EmuMemoryError:
        pass
    else:
        raise AssertionError("an i64 offset past the tensor read")
    try:
        fx.ptr_load(ptr + (fx.Int32(46341) * 46341))
    except EmuMemoryError as exc:
        assert "element -2147479015" in str(exc), exc
    else:
        raise AssertionError("a wrapped negative offset read")
    # the induction variable of a dynamic range is i32; an i64 bound is refused
    def body(n: fx.Int32):
        acc = fx.Int32(0)
        for i in range(n, n + 2):
            acc = acc + i * 2**30
        return acc

    f = divergent_function(body, fake_flydsl.HELPERS)
    assert list(f(fx.Int32(1)).a) == [wrap(2**30 + 2 * 2**30)] * 4

    def body64(n: fx.Int64):
        for i in range(n):
            pass

    _fails(lambda: divergent_function(body64, fake_flydsl.HELPERS)(fx.Int64(2)),
           "i32", "an i64 loop bound passed")


def wrap(v):
    return core.wrap_int(v, 32)


def print_checks(*names) -> None:
    """Run every check (or those named) and print one JSON line each: its name and, where it
    failed, why."""
    for name, check in list(globals().items()):
        if name.startswith("check_") and (not names or name in names):
            try:
                check()
            except Exception:  # noqa: BLE001  (any failure is the finding)
                print(json.dumps({"check": name, "error": traceback.format_exc(limit=3)}), flush=True)
            else:
                print(json.dumps({"check": name, "error": None}), flush=True)


# -- a case whose key pool is past 8 GiB --------------------------------------------------------

# blocks of 64 tokens of 64 channels: 1088 words a block, so a block's word offset passes 2^31 at
# block 1,973,791 and a 9 GiB pool's upper blocks need 64-bit offsets
POOL_CASE = dict(batch=2, next_n=1, heads=32, head_dim=64, kv_block=64, preshuffle=False, context_lens=[200, 70],
                 max_model_len=272, next_n_lens=None, seed=0)
POOL_TUNING = dict(num_waves=1, subtiles=1, num_splits=1)


def print_pool_case(kernel_files, pool_bytes=9 << 30) -> None:
    """Run ``POOL_CASE`` with a key pool of ``pool_bytes`` on the emulated kernel of each file and
    print one JSON line each: its error (None where it matched the oracle), seconds, and the
    process's peak RSS since it started (``VmHWM``: ``getrusage``'s peak is the forking parent's
    where that was larger). The pool is ``torch.empty``: only the blocks the sequences use are
    written, so the pool costs the pages of those blocks alone."""
    import re
    import time
    from pathlib import Path

    from flydsl_emulator.op import load_kernel_module, make_emulated_op
    from oracle import compare_logits, make_inputs, reference_logits

    def rss_mib():
        return int(re.search(r"^VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) // 1024

    before = rss_mib()
    inputs = make_inputs(**POOL_CASE, min_pool_bytes=pool_bytes)
    expected, magnitude = reference_logits(inputs)
    for i, path in enumerate(kernel_files):
        op = make_emulated_op(load_kernel_module(path, name=f"kernel.flydsl_gfx950_pool{i}"))
        start = time.perf_counter()
        try:
            got = op(*inputs.op_args(), **inputs.op_kwargs(), **POOL_TUNING)
            compare_logits(got, expected, magnitude)
        except Exception as error:  # noqa: BLE001  (any failure is the finding)
            message = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        else:
            message = None
        print(json.dumps({"kernel": str(path), "error": message, "seconds": round(time.perf_counter() - start, 3),
                          "pool_bytes": inputs.kv_cache.numel(), "rss_before_inputs_mib": before,
                          "max_rss_mib": rss_mib()}), flush=True)
