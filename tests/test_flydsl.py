"""The FlyDSL gfx950 kernel: it compiles here (no device needed) and runs only on gfx950.

Compiling needs flydsl and an ``ld.lld``; without them the whole module is skipped, so CI
without the AMD toolchain stays green. Each configuration is compiled once, in a child
process, and its ISA is checked for the instructions the design promises.
"""

import functools
import re

import pytest
import torch

pytest.importorskip("flydsl", reason="the FlyDSL gfx950 backend needs flydsl (pip install flydsl)")

from kernel.flydsl_gfx950 import KernelConfig, fp8_paged_mqa_logits_gfx950  # noqa: E402
from kernel.gfx950_compile import compile_for_gfx950, rocm_toolkit_root  # noqa: E402
from bench.inspect_gfx950 import SCALED_MFMA, instructions  # noqa: E402
from oracle import make_inputs  # noqa: E402
from suites.gfx950_cases import check_gfx950_case, gfx950_suite  # noqa: E402

if rocm_toolkit_root() is None:
    pytest.skip(
        "compiling for gfx950 needs ld.lld (apt-get install lld-19, or a ROCm install at $ROCM_PATH)",
        allow_module_level=True,
    )

COMPILED = {
    "flat-h64-d128-kvb64-n1": KernelConfig(heads=64, head_dim=128, kv_block=64, preshuffle=False, next_n=1),
    "preshuffle-h64-d128-kvb64-n2": KernelConfig(heads=64, head_dim=128, kv_block=64, preshuffle=True, next_n=2),
    "flat-h32-d64-kvb1-ragged-n2": KernelConfig(heads=32, head_dim=64, kv_block=1, next_n=2, num_waves=2,
                                                subtiles=1, has_next_n_lens=True),
}


@functools.cache
def isa_of(name: str) -> str:
    return compile_for_gfx950(COMPILED[name])


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_isa_has_one_scaled_mfma_per_head_tile_slot_and_k_step(name):
    config = COMPILED[name]
    ops = instructions(isa_of(name))
    k_steps = -(-config.head_dim // 128)
    # the loop body holds one 16-head x 16-token x 128-channel MFMA per
    # (16-token sub-tile, next_n slot, head tile, K step)
    assert ops.count(SCALED_MFMA) == config.subtiles * config.next_n * (config.heads // 16) * k_steps


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_isa_loads_each_key_slice_once_for_all_next_n_slots(name):
    config = COMPILED[name]
    ops = instructions(isa_of(name))
    k_steps = -(-config.head_dim // 128)
    head_tiles = config.heads // 16
    q_loads = 2 * config.next_n * head_tiles * k_steps  # 32 query bytes per lane: two 16-byte loads
    weight_loads = config.next_n * head_tiles  # 4 head weights per lane
    key_loads = 2 * k_steps * config.subtiles  # 32 key bytes per lane and sub-tile, shared by every next_n slot
    assert ops.count("global_load_dwordx4") == q_loads + weight_loads + key_loads
    assert "global_store_dword" in ops


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_isa_keeps_everything_in_registers(name):
    isa = isa_of(name)
    assert not any(op.startswith("scratch_") for op in instructions(isa))
    assert re.search(r"\.vgpr_spill_count:\s+0\b", isa)


def test_unsupported_config_is_refused_before_compiling():
    with pytest.raises(ValueError, match="heads"):
        compile_for_gfx950(KernelConfig(heads=24))
    with pytest.raises(ValueError, match="preshuffle"):
        compile_for_gfx950(KernelConfig(kv_block=8, preshuffle=True))


# -- execution: only where a gfx950 device is present ------------------------------------------

def _gfx950_present() -> bool:
    return (
        torch.cuda.is_available()
        and torch.version.hip is not None
        and torch.cuda.get_device_properties(0).gcnArchName.startswith("gfx950")
    )


@pytest.mark.skipif(_gfx950_present(), reason="checks the refusal of other devices")
def test_launcher_checks_before_launching_elsewhere():
    inputs = make_inputs(batch=4, next_n=1, heads=64, head_dim=128, kv_block=64, preshuffle=False,
                         context_lens=[1, 64, 700, 4097], max_model_len=4224, next_n_lens=None, seed=7)
    out = torch.full((len(inputs.context_lens), inputs.max_model_len), 7.0)
    with pytest.raises(ValueError, match="gfx950"):
        fp8_paged_mqa_logits_gfx950(*inputs.op_args(), **inputs.op_kwargs(), out=out)
    with pytest.raises(ValueError, match="num_waves"):
        fp8_paged_mqa_logits_gfx950(*inputs.op_args(), **inputs.op_kwargs(), out=out, num_waves=3)
    assert torch.all(out == 7.0), "a refused call wrote to out"


@pytest.mark.skipif(not _gfx950_present(), reason="needs a gfx950 device")
@pytest.mark.parametrize("gfx950_case", gfx950_suite("curated"), ids=lambda case: case.id)
def test_launcher_matches_reference(gfx950_case):
    # waves per program and sub-tiles per wave are compile-time axes of the suite, as are the
    # shapes, layouts and next_n; every case runs twice, into a fresh and a caller's strided out
    check_gfx950_case(gfx950_case, fp8_paged_mqa_logits_gfx950, "cuda")
