"""Neuron placement: which prefix of each layer's hot-first FFN lives on the GPU.

    pinfer solve --model model.gguf --freq profile.npz --budget 8 12 24 --hw rtx4090 \\
        --json placement.json --plot placement.png [--write-gguf out.gguf]

Inputs
------
- Activation frequencies f_{l,i} in [0, 1] per layer l and neuron i: an npz from
  profiling (``freq_0 .. freq_{L-1}`` arrays, or one 2-D ``[L, n]`` array; loaded with
  ``allow_pickle=False``), or the ``blk.N.ffn_freq`` tensors of an extended GGUF.
  The solver works in HOT-FIRST order: each layer is sorted by descending frequency
  with a stable sort (``np.argsort(-f, kind="stable")``, the order the extended GGUF
  uses); k_l always counts neurons of that order, so "layer l's GPU share" is the
  prefix ``[0, k_l)``.
- A model description (:class:`ModelDesc`, from a GGUF file or a JSON file): per
  layer the FFN size n_l, the bytes of one neuron b_l (its gate row + up row + down
  column in the file's weight types; ``ffn_down_t`` counts instead of ``ffn_down``
  when present), the bytes of attention (+ norms, biases), of the predictor
  (fc1/fc2), and of the KV cache per token; globally the token-embedding, output and
  output-norm bytes.
- A hardware description (:class:`Hardware`): GPU and CPU memory bandwidth, PCIe
  bandwidth, synchronisation latency, VRAM; presets ``rtx4090 rtx3090 rtx4070 a100
  h100 cpu`` (rough public figures, override with JSON or flags).
- One or more VRAM budgets (GiB); each gives its own placement.

Formulation (one MILP per budget, solved with HiGHS)
----------------------------------------------------
Neurons are grouped into G_l = ceil(n_l / g) groups of g consecutive hot-first
neurons (the last group may be short: size s_{l,j}); group mass
M_{l,j} = sum of f over the group.

Variables
  x_{l,j} in {0,1}   group j of layer l is on the GPU
  z_l     in {0,1}   layer l uses the GPU at all
  t_l     >= 0       (only with balance="makespan") the layer's time estimate, in us

Objective (primary)
  maximise  sum_l w_l sum_j M_{l,j} x_{l,j}
  = the expected number of activated neurons per token that the GPU serves
  (w_l = 1 unless per-layer weights are given).  k_l = sum_j s_{l,j} x_{l,j}.

Constraints
  prefix     x_{l,j+1} <= x_{l,j}                     (the GPU share is a prefix)
  link       x_{l,0} <= z_l
  minimum    sum_j s_{l,j} x_{l,j} >= m_l z_l          (big-M form: nothing, or >= m_l)
             x_{l,q_l-1} >= z_l, q_l = ceil(m_l/g)     (the same, tightened for the LP)
             z_l = 0 when m_l > n_l (the layer can never pay for its sync)
  budget     sum_{l,j} b_l s_{l,j} x_{l,j} <= B - R
             R = resident dense parts: attention + norms + predictors of every layer,
             the KV cache for ``ctx`` tokens, the output matrix and output norm (unless
             output_on_gpu=False), the token embeddings (only if embd_on_gpu=True), and
             a fixed reserve for compute buffers.  B < R is an error.

Two equivalent forms are built (``formulation=``):
  "groups"   exactly the model above (sum G_l binaries; slow to prove optimal at scale).
  "prefix"   (default) one integer k_l in [0, G_l] (GPU groups) per layer instead of
             the x_{l,j}; the mass becomes a continuous phi_l bounded by the tangents
             of the concave cumulative mass C_l(j) = sum_{i<j} M_{l,i}:
                 phi_l <= C_l(j) + M_{l,j} (k_l - j),   j = 0..G_l-1
             (exact at integer k_l because M_{l,j} is non-increasing in hot-first
             order); objective sum_l w_l phi_l; minimum q_l z_l <= k_l <= G_l z_l
             (big-M); budget sum_l b_l (g k_l - (g G_l - n_l) y_l) <= B - R with a
             binary y_l <= k_l / G_l crediting a short last group.  Branching on
             80 integers instead of 36k binaries is what makes LLaMA-70B sizes fast.
  The makespan stage always uses "groups" (its GPU time needs the exact mass).
HiGHS stops at ``mip_rel_gap`` (default 1e-4; its status then reads "Optimal");
the reported gap is HiGHS's.  Every returned placement is re-checked exactly
against the constraints in float64 (:func:`check_placement`).

The communication minimum m_l.  Per token, a layer that uses the GPU pays a fixed
  c = sync_latency + 2 * n_embd * act_bytes / pcie_bw
(the activation goes to the GPU and its partial result comes back).  Moving the
hot-first prefix [0, k) saves b_l F_l(k) (1/cpu_bw - 1/gpu_bw) seconds, where
F_l(k) = sum_{i<k} f_{l,i} (both sides read only the rows of active neurons).
m_l is the smallest k whose saving covers c; if none does (or gpu_bw <= cpu_bw),
m_l = n_l + 1.  ``min_neurons=`` overrides it with a fixed count.

Time model (for the report and the optional balance terms), per layer and token:
  T_cpu_l = b_l (F_l - sum_j M_{l,j} x_{l,j}) / cpu_bw      (cold active rows)
  T_gpu_l = b_l  sum_j M_{l,j} x_{l,j} / gpu_bw + c z_l
The CPU and GPU parts of a layer run concurrently, so the layer takes
max(T_cpu_l, T_gpu_l); the report gives sum_l of that as ``est_token_ms``.

Optional balance (``balance=``):
  "off"        (default) the primary objective only.
  "makespan"   lexicographic second stage: with t_l >= T_cpu_l, t_l >= T_gpu_l and
               the primary objective held at >= (1 - balance_tol) * optimum,
               minimise sum_l t_l.  balance_tol = 0 only breaks ties; a larger
               tolerance lets it give up mass for estimated time.
  "constraint" a layer that uses the GPU must be balanced:
               T_cpu_l <= T_gpu_l + slack + U_l (1 - z_l), U_l = b_l F_l / cpu_bw
               (big-M: inactive when z_l = 0), slack = ``balance_slack_us``.

The greedy baseline (:func:`solve_greedy`) repeatedly takes the move with the
highest weighted mass per byte that still fits: for an unused layer the move is
its whole minimum block (ceil(m_l/g) groups), afterwards one group at a time.

Extended-GGUF metadata layout (written by :func:`pinfer.extgguf.write_placements`,
read by :func:`pinfer.extgguf.read_placements`)
-----------------------------------------------------------------------------
  pinfer.placement.count                u32    number of entries P (>= 1)
  pinfer.placement.N.budget_bytes       u64    the VRAM budget B of entry N, bytes
  pinfer.placement.N.solver             str    "highs-ilp" or "greedy"
  pinfer.placement.N.objective          f64    the primary objective (above)
  pinfer.placement.N.gpu_neurons        [i32]  k_l for l = 0..n_layer-1: layer l's
                                               neurons [0, k_l) of the hot-first
                                               order are on the GPU (0 <= k_l <= n_l)
for N = 0 .. P-1, ordered by strictly increasing budget_bytes.  A runtime given a
budget uses the entry with the largest budget_bytes <= its budget.
"""
from __future__ import annotations

from ..extgguf import Placement, PlacementError, add_placements, placement_kv, read_placements, write_placements
from .cli import add_parser, main
from .cost import (
                       GIB,
                       Instance,
                       ModelDesc,
                       build_instance,
                       check_placement,
                       evaluate,
                       freqs_from_gguf,
                       hot_first,
                       load_freqs,
                       load_model,
                       min_neurons_for,
                       model_from_gguf,
                       resident_breakdown,
)
from .hardware import HARDWARE, Hardware, hardware
from .report import plot, report, summary
from .solver import BALANCE, FORMULATIONS, SOLVERS, solve, solve_greedy, solve_ilp
from .solver import _available as _available  # used by pinfer.place
from .solver import _budget_bytes as _budget_bytes  # used by pinfer.place

__all__ = ["BALANCE", "FORMULATIONS", "GIB", "HARDWARE", "SOLVERS", "Hardware", "Instance", "ModelDesc",
           "Placement", "PlacementError", "add_parser", "add_placements", "build_instance", "check_placement",
           "evaluate", "freqs_from_gguf", "hardware", "hot_first", "load_freqs", "load_model", "main",
           "min_neurons_for", "model_from_gguf", "placement_kv", "plot", "read_placements", "report",
           "resident_breakdown", "solve", "solve_greedy", "solve_ilp", "summary", "write_placements"]
