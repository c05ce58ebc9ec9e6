"""The compile-time configuration of the FlyDSL gfx950 kernel (``kernel.flydsl_gfx950``): the
MFMA shape its tiles are built from, its structural choices, and ``KernelConfig``. Importing
this module needs no flydsl, so suites and tools name configurations on any machine."""

from dataclasses import dataclass

GFX950 = "gfx950"  # the architecture, as ROCm names it

# -- the MFMA shape: 16 heads x 16 tokens x 128 channels, 64 lanes --
WAVE_SIZE = 64
MFMA_ROWS = 16  # heads per MFMA (A side) and tokens per MFMA (B side)
MFMA_K = 128  # fp8 channels per MFMA
LANE_GROUPS = WAVE_SIZE // MFMA_ROWS  # 4 groups of 16 lanes
LANE_K_BYTES = MFMA_K // LANE_GROUPS  # 32 channels (bytes) per lane per K step
PRESHUFFLE_TILE = 16  # shuffle_weight(16, 16): 16 tokens x 16 channels per 256-byte sub-tile

# -- the structural choices: waves per program, 16-token sub-tiles per wave per tile --
DEFAULT_NUM_WAVES = 4
NUM_WAVES_CHOICES = (1, 2, 4, 8)
DEFAULT_SUBTILES = 2
SUBTILES_CHOICES = (1, 2, 4)


@dataclass(frozen=True)
class KernelConfig:
    """The compile-time parameters of one kernel: a distinct ISA each."""

    heads: int = 64
    head_dim: int = 128
    kv_block: int = 64
    preshuffle: bool = False
    next_n: int = 1
    num_waves: int = DEFAULT_NUM_WAVES  # waves per program
    subtiles: int = DEFAULT_SUBTILES  # 16-token sub-tiles per wave per tile: loads in flight
    has_next_n_lens: bool = False

    def check(self) -> None:
        if self.heads < MFMA_ROWS or self.heads % MFMA_ROWS:
            raise ValueError(f"heads: the gfx950 kernel needs a multiple of {MFMA_ROWS}, got {self.heads}")
        if self.head_dim < LANE_K_BYTES or self.head_dim % LANE_K_BYTES:
            raise ValueError(f"head_dim: the gfx950 kernel needs a multiple of {LANE_K_BYTES}, got {self.head_dim}")
        if self.preshuffle and self.kv_block % PRESHUFFLE_TILE:
            raise ValueError(f"preshuffle: needs a kv_cache block size KVB divisible by 16, got KVB={self.kv_block}")
        if self.kv_block < 1 or self.next_n < 1:
            raise ValueError(f"kv_block and next_n must be positive, got {self.kv_block} and {self.next_n}")
        if self.num_waves not in NUM_WAVES_CHOICES:
            raise ValueError(f"num_waves: expected one of {NUM_WAVES_CHOICES}, got {self.num_waves!r}")
        if self.subtiles not in SUBTILES_CHOICES:
            raise ValueError(f"subtiles: expected one of {SUBTILES_CHOICES}, got {self.subtiles!r}")

    @property
    def block_n(self) -> int:
        """Tokens per tile."""
        return self.num_waves * self.subtiles * MFMA_ROWS

    def constexprs(self) -> tuple:
        """The kernel's meta-parameters, in its order."""
        return (self.next_n, self.heads, self.head_dim, self.kv_block, self.preshuffle,
                self.has_next_n_lens, self.num_waves, self.subtiles)
