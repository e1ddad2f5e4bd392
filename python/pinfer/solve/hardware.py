"""Hardware descriptions for the placement solver: presets and overrides."""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, Union

from ..extgguf import PlacementError

# ---------------------------------------------------------------- hardware

@dataclasses.dataclass
class Hardware:
    name: str
    vram_gib: float     # device memory (the default budget)
    gpu_bw: float       # GPU memory bandwidth, GB/s
    cpu_bw: float       # CPU memory bandwidth, GB/s
    pcie_bw: float      # host<->device, GB/s
    sync_us: float      # one CPU<->GPU synchronisation, microseconds
    act_bytes: int = 4  # bytes per activation element sent over PCIe

    @property
    def has_gpu(self) -> bool:
        return self.vram_gib > 0 and self.gpu_bw > 0 and self.pcie_bw > 0


# Public spec-sheet bandwidths; CPU figures are typical dual-channel DDR5 desktops
# (consumer cards) or server sockets (A100/H100). Rough by design: override them.
HARDWARE: Dict[str, Hardware] = {
    "rtx4090": Hardware("rtx4090", 24, 1008, 60, 25, 10),
    "rtx3090": Hardware("rtx3090", 24, 936, 50, 25, 10),
    "rtx4070": Hardware("rtx4070", 12, 504, 50, 25, 10),
    "a100": Hardware("a100", 80, 2039, 150, 25, 10),
    "h100": Hardware("h100", 80, 3350, 200, 50, 8),
    "cpu": Hardware("cpu", 0, 0, 50, 0, 0),
}


def hardware(preset: Union[str, Hardware, dict] = "rtx4090", **overrides) -> Hardware:
    """A preset by name (or a dict/JSON-like mapping with a ``preset`` base), with overrides."""
    if isinstance(preset, Hardware):
        hw = dataclasses.replace(preset)
    elif isinstance(preset, dict):
        d = dict(preset)
        base = hardware(d.pop("preset", "rtx4090"))
        unknown = set(d) - {f.name for f in dataclasses.fields(Hardware)}
        if unknown:
            raise PlacementError(f"hardware: unknown field(s) {sorted(unknown)}")
        hw = dataclasses.replace(base, **d)
    else:
        key = str(preset).lower().replace("-", "").replace(" ", "")
        if key not in HARDWARE:
            raise PlacementError(f"hardware: unknown preset '{preset}' (known: {', '.join(HARDWARE)})")
        hw = dataclasses.replace(HARDWARE[key])
    hw = dataclasses.replace(hw, **{k: v for k, v in overrides.items() if v is not None})
    for f in ("vram_gib", "gpu_bw", "cpu_bw", "pcie_bw", "sync_us"):
        v = getattr(hw, f)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise PlacementError(f"hardware: {f} must be a finite number >= 0, got {v!r}")
    if hw.cpu_bw <= 0:
        raise PlacementError("hardware: cpu_bw must be > 0")
    return hw
