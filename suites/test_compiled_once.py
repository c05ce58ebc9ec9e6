"""A serving loop compiles its kernel once per model and next_n.

Between decode steps the batch and the contexts drift, and with them the launcher's own split
count. None of these may pick another compiled kernel: a value Triton compiles into the kernel
(a ``tl.constexpr``, or an int it specializes: equal to one, divisible by 16) that follows the
batch would stall the loop on a JIT compile at each new size, with every value right. The
kernel each launch needs is its compile target (``mutants/compiled.py``), planned here on
tensors that claim a GPU of 132 SMs.
"""

import pytest
import torch

from kernel.paged_mqa_logits import plan_launch
from mutants.compiled import as_launched_on_cuda, target_of_launch
from oracle import make_inputs
from suites.claimed_gpu import claimed_sms, on_claimed_gpu

# a 64-block table row as a serving engine sizes it: the launcher's split count follows the
# batch (a full GPU's worth of programs, at most a quarter of the table's tiles)
MAX_MODEL_LEN = 4096
BATCHES = (1, 2, 3, 17, 64, 131, 133, 200, 256, 300)


def _targets_of_a_loop() -> dict[int, str]:
    keys = {}
    for batch in BATCHES:
        contexts = [1 + (97 * b + 31 * batch) % 1500 for b in range(batch)]
        inputs = make_inputs(batch=batch, next_n=2, heads=16, head_dim=32, kv_block=64, preshuffle=False,
                             context_lens=contexts, max_model_len=MAX_MODEL_LEN, next_n_lens=None, seed=batch,
                             spare_blocks_per_row=MAX_MODEL_LEN // 64 - -(-max(contexts) // 64))
        moved, keywords = on_claimed_gpu(inputs, {}, out_rows=batch * 2)
        with claimed_sms():
            launch = plan_launch(*moved.op_args(), **moved.op_kwargs(), **keywords, validate=False)
        keys[batch] = (launch.grid[1], target_of_launch(as_launched_on_cuda(launch)).key)
    return keys


@pytest.mark.skipif(torch.cuda.is_available(), reason="plans on tensors that claim a GPU")
def test_a_decode_loop_whose_batch_drifts_compiles_one_kernel():
    keys = _targets_of_a_loop()
    assert len({splits for splits, _ in keys.values()}) > 2, keys  # the split count did follow the batch
    kernels = {key for _, key in keys.values()}
    assert len(kernels) == 1, (f"{len(kernels)} compiled kernels for one model over batches {BATCHES}:"
                               f" {sorted(kernels)}")


@pytest.mark.skipif(torch.cuda.is_available(), reason="plans on tensors that claim a GPU")
def test_a_split_count_the_jit_specializes_compiles_a_kernel_per_count(monkeypatch):
    import mutants.compiled as compiled

    monkeypatch.setattr(compiled, "not_specialized", lambda fn: set())  # do_not_specialize dropped
    assert len({key for _, key in _targets_of_a_loop().values()}) > 1
    monkeypatch.undo()
    monkeypatch.setattr(compiled, "declared_constexprs", lambda fn: {"num_splits"})  # made a tl.constexpr
    assert len({key for _, key in _targets_of_a_loop().values()}) > 2
