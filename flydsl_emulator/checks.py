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
    src_calls = []

    def body(flag: fx.Int32):
        t = fx.thread_idx.x
        x = t * 0
        if t % 2 == 1:
            x = t + 100
            src_calls.append(1)
        else:
            x = x - 1
        y = x
        if fx.const_expr(True):
            y = y + 0
        return y

    from flydsl_emulator.transform import divergent_function
    f = divergent_function(body, fake_flydsl.HELPERS)
    program(8)
    y = f(fx.Int32(0)).a
    assert list(y) == [-1, 101, -1, 103, -1, 105, -1, 107], y
    assert f.__emu_divergent_ifs__ == 1


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
    buf = core.Buffer("out", torch.zeros(4))
    try:
        core.store(v, core.Ptr(buf, 0, np.float32) + (fx.thread_idx.x % 2))
    except EmuError as exc:
        assert "race" in str(exc)
    else:
        raise AssertionError("write race not caught")


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


def print_checks() -> None:
    """Run every check and print one JSON line each: its name and, where it failed, why."""
    for name, check in list(globals().items()):
        if name.startswith("check_"):
            try:
                check()
            except Exception:  # noqa: BLE001  (any failure is the finding)
                print(json.dumps({"check": name, "error": traceback.format_exc(limit=3)}), flush=True)
            else:
                print(json.dumps({"check": name, "error": None}), flush=True)
