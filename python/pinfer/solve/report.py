"""The solver's report: JSON, the text summary, and the plot of the GPU share per layer."""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, Optional, Sequence

import numpy as np

from ..extgguf import Placement, PlacementError
from ..outfile import atomic_output
from .cost import GIB, Instance


def report(inst: Instance, placements: Sequence[Placement], greedy: Optional[Sequence[Placement]] = None) -> dict:
    d: Dict[str, Any] = {
        "model": {"name": inst.model.name, "n_layer": inst.model.n_layer, "n_ff": inst.model.n_ff,
                  "neuron_bytes": inst.model.neuron_bytes},
        "hardware": dataclasses.asdict(inst.hw),
        "group": inst.group,
        "resident": inst.resident,
        "min_neurons": inst.min_neurons,
        "overhead_us": inst.overhead_us,
        "order": "hot-first (stable descending sort of the frequencies)",
        "placements": [p.to_dict() for p in placements],
    }
    if greedy:
        for p, g in zip(d["placements"], greedy):
            p["greedy"] = {"objective": g.objective, "gpu_neurons": g.gpu_neurons, "time_s": g.time_s,
                           "mass_fraction": g.mass_fraction}
    return json.loads(json.dumps(d, default=float).replace("NaN", "null"))


def summary(inst: Instance, placements: Sequence[Placement], greedy: Optional[Sequence[Placement]] = None) -> str:
    lines = [f"model: {inst.model.name or '?'}  {inst.model.n_layer} layers  group {inst.group}  "
             f"hardware {inst.hw.name}",
             f"resident dense parts: {inst.resident_bytes / GIB:.2f} GiB ("
             + ", ".join(f"{k} {v / GIB:.2f}" for k, v in inst.resident.items() if v) + ")",
             f"minimum neurons per GPU layer: {min(inst.min_neurons)}..{max(inst.min_neurons)}",
             f"{'budget GiB':>10} {'solver':>9} {'status':>10} {'objective':>12} {'GPU mass':>9} {'layers':>6} "
             f"{'FFN GiB':>8} {'gap':>8} {'time s':>7} {'est ms/tok':>10}"
             + (f" {'greedy obj':>11}" if greedy else "")]
    for i, p in enumerate(placements):
        gap = "-" if p.mip_gap != p.mip_gap else f"{p.mip_gap:.1e}"
        s = (f"{p.budget_bytes / GIB:>10.4g} {p.solver:>9} {p.status[:10]:>10} {p.objective:>12.2f} "
             f"{100 * p.mass_fraction:>8.1f}% {p.layers_on_gpu:>6} {p.ffn_gpu_bytes / GIB:>8.2f} {gap:>8} "
             f"{p.time_s:>7.2f} {p.est_token_ms:>10.2f}")
        if greedy:
            s += f" {greedy[i].objective:>11.2f}"
        lines.append(s)
    if placements:
        lines.append(f"(CPU-only estimate {placements[0].est_cpu_only_ms:.2f} ms/token; "
                     "objective = expected active neurons per token served by the GPU)")
    return "\n".join(lines)


def plot(inst: Instance, placements: Sequence[Placement], path: str, title: Optional[str] = None) -> None:
    """PNG: the GPU share k_l / n_l of every layer, one line per budget
    (``pinfer solve --plot`` and ``pinfer place --plot``)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlacementError("--plot needs matplotlib: pip install matplotlib") from None
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    layers = np.arange(inst.model.n_layer)
    n = np.asarray(inst.model.n_ff, dtype=float)
    for p in placements:
        ax.plot(layers, 100 * np.asarray(p.gpu_neurons) / n, marker="o",
                label=f"{p.budget_bytes / GIB:.4g} GiB: {100 * p.mass_fraction:.1f}% of activations on the GPU")
    ax.set_xlabel("layer")
    ax.set_ylabel("GPU share of the layer's FFN neurons (%)")
    ax.set_ylim(-2, 102)
    if inst.model.n_layer <= 40:
        ax.set_xticks(layers)
    ax.set_title(title or f"neuron placement: {inst.model.name or 'model'}, {inst.hw.name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_output(path, what="plot") as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
