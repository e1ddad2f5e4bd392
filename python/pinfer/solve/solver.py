"""The solvers: the greedy baseline and the HiGHS MILP (both forms), one placement per budget."""
from __future__ import annotations

import contextlib
import dataclasses
import heapq
import math
import os
import sys
import time
from typing import List, Sequence, Union

import numpy as np

from .. import keys as K
from ..extgguf import Placement, PlacementError
from .cost import GIB, Instance, ModelDesc, build_instance, check_placement, evaluate
from .hardware import Hardware, hardware

SOLVERS = (K.SOLVER_ILP, K.SOLVER_GREEDY)
BALANCE = ("off", "makespan", "constraint")


def _finish(inst: Instance, budget: float, solver: str, status: str, k: List[int], gap: float, t: float,
            balance: str, note: str = "") -> Placement:
    e = evaluate(inst, k)
    return Placement(budget_bytes=int(budget), solver=solver, status=status, objective=e["objective"],
                     gpu_neurons=[int(x) for x in k], mip_gap=float(gap), time_s=float(t),
                     resident_bytes=inst.resident_bytes, ffn_gpu_bytes=e["ffn_gpu_bytes"],
                     mass_fraction=e["mass_fraction"], layers_on_gpu=int(e["layers_on_gpu"]),
                     est_token_ms=e["est_token_ms"], est_cpu_only_ms=e["est_cpu_only_ms"], balance=balance,
                     note=note)


def _available(inst: Instance, budget_bytes: float) -> float:
    if not math.isfinite(budget_bytes) or budget_bytes < 0:
        raise PlacementError(f"budget must be a finite number of bytes >= 0, got {budget_bytes}")
    avail = budget_bytes - inst.resident_bytes
    if avail < 0 and inst.hw.has_gpu:
        parts = ", ".join(f"{k} {v / GIB:.2f}" for k, v in inst.resident.items() if v)
        raise PlacementError(f"budget {budget_bytes / GIB:.2f} GiB is below the resident dense parts "
                             f"{inst.resident_bytes / GIB:.2f} GiB ({parts}); lower --ctx or raise the budget")
    return avail


# ---------------------------------------------------------------- greedy baseline

def solve_greedy(inst: Instance, budget_bytes: float) -> Placement:
    """Highest weighted mass per byte first; a layer's first move is its whole minimum block."""
    t0 = time.perf_counter()
    avail = _available(inst, budget_bytes)
    L = inst.model.n_layer
    kg = [0] * L  # groups taken
    heap: List[tuple] = []

    def push(l):
        q = inst.min_groups[l]
        G = inst.sizes[l].size
        lo = kg[l]
        hi = q if lo == 0 else lo + 1
        if hi > G or inst.min_neurons[l] > inst.freqs[l].size:
            return
        nb = float(inst.sizes[l][lo:hi].sum()) * inst.model.neuron_bytes[l]
        gain = inst.weights[l] * float(inst.mass[l][lo:hi].sum())
        heapq.heappush(heap, (-gain / nb, l, hi, nb))

    if inst.hw.has_gpu:
        for l in range(L):
            push(l)
    while heap:
        _, l, hi, nb = heapq.heappop(heap)
        if nb <= avail:
            avail -= nb
            kg[l] = hi
            push(l)
    k = [int(inst.sizes[l][:kg[l]].sum()) for l in range(L)]
    return _finish(inst, budget_bytes, K.SOLVER_GREEDY, "heuristic", k, float("nan"), time.perf_counter() - t0, "off")


# ---------------------------------------------------------------- ILP

@contextlib.contextmanager
def _quiet_stdout():
    """HiGHS prints a banner on stdout from C++ at first use; keep CLI output clean."""
    try:
        sys.stdout.flush()
        fd = os.dup(1)
    except (OSError, ValueError):
        yield
        return
    try:
        with open(os.devnull, "w") as dn:
            os.dup2(dn.fileno(), 1)
            try:
                yield
            finally:
                os.dup2(fd, 1)
    finally:
        os.close(fd)


def _highs():
    try:
        import highspy
    except ImportError:
        raise PlacementError("the ILP needs HiGHS: pip install highspy (or use --solver greedy)") from None
    with _quiet_stdout():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    return highspy, h


class _Model:
    """A HiGHS model under construction: columns by name range, rows in CSR."""

    def __init__(self, highspy):
        self.hs = highspy
        self.inf = highspy.kHighsInf
        self.lo, self.hi, self.cost, self.integer = [], [], [], []
        self.rlo, self.rhi, self.starts, self.idx, self.val = [], [], [0], [], []

    def cols(self, n, lo, hi, integer, cost=0.0):
        first = len(self.lo)
        self.lo += list(np.broadcast_to(np.asarray(lo, float), (n,)))
        self.hi += list(np.broadcast_to(np.asarray(hi, float), (n,)))
        self.cost += list(np.broadcast_to(np.asarray(cost, float), (n,)))
        self.integer += [integer] * n
        return first

    def row(self, cols, coefs, lo, hi):
        self.idx.extend(int(c) for c in cols)
        self.val.extend(float(v) for v in coefs)
        self.starts.append(len(self.idx))
        self.rlo.append(lo)
        self.rhi.append(hi)

    def highs(self, h, maximize=True):
        hs = self.hs
        lp = hs.HighsLp()
        lp.num_col_ = len(self.lo)
        lp.num_row_ = len(self.rlo)
        lp.col_cost_ = np.array(self.cost)
        lp.col_lower_ = np.array(self.lo)
        lp.col_upper_ = np.array(self.hi)
        lp.row_lower_ = np.array(self.rlo)
        lp.row_upper_ = np.array(self.rhi)
        lp.sense_ = hs.ObjSense.kMaximize if maximize else hs.ObjSense.kMinimize
        lp.a_matrix_.format_ = hs.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.array(self.starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.array(self.idx, dtype=np.int32)
        lp.a_matrix_.value_ = np.array(self.val)
        lp.integrality_ = [hs.HighsVarType.kInteger if i else hs.HighsVarType.kContinuous for i in self.integer]
        h.passModel(lp)


def _time_coefs(inst: Instance, l: int):
    b = inst.model.neuron_bytes[l]
    return b / inst.hw.cpu_bw / 1e3, b / inst.hw.gpu_bw / 1e3  # us per unit of activation mass


def _model_prefix(inst: Instance, highspy, avail: float, balance: str, slack: float):
    """Compact form: integer k_l (groups), binary z_l, concave mass phi_l by tangents."""
    L = inst.model.n_layer
    md = _Model(highspy)
    G = [s.size for s in inst.sizes]
    scale = max(avail, 1.0)
    k0 = md.cols(L, 0.0, [float(g) for g in G], True)
    z0 = md.cols(L, 0.0, [0.0 if inst.min_neurons[l] > inst.freqs[l].size else 1.0 for l in range(L)], True)
    short = [int(inst.group * G[l] - inst.freqs[l].size) for l in range(L)]  # neurons missing in the last group
    y0 = md.cols(L, 0.0, [1.0 if short[l] else 0.0 for l in range(L)], True)
    p0 = md.cols(L, 0.0, [float(inst.mass[l].sum()) for l in range(L)], False, inst.weights)
    cols, coefs = [], []
    for l in range(L):
        b = inst.model.neuron_bytes[l]
        cols += [k0 + l, y0 + l]
        coefs += [b * inst.group / scale, -b * short[l] / scale]
    md.row(cols, coefs, -md.inf, avail / scale)  # budget
    for l in range(L):
        M = inst.mass[l]
        C = np.concatenate([[0.0], np.cumsum(M)])
        prev = None
        for j in range(G[l]):  # phi_l <= C(j) + M_j (k_l - j): exact at integer k for non-increasing M
            if prev is not None and M[j] == prev:
                continue  # same line as the previous piece
            prev = M[j]
            md.row((p0 + l, k0 + l), (1.0, -M[j]), -md.inf, C[j] - M[j] * j)
        md.row((k0 + l, z0 + l), (1.0, -float(inst.min_groups[l])), 0.0, md.inf)  # k >= q z
        md.row((k0 + l, z0 + l), (1.0, -float(G[l])), -md.inf, 0.0)  # k <= G z (big-M)
        if short[l]:
            md.row((k0 + l, y0 + l), (1.0, -float(G[l])), 0.0, md.inf)  # y = 1 only for the full layer
        if balance == "constraint":
            a_cpu, a_gpu = _time_coefs(inst, l)
            U = a_cpu * float(inst.mass[l].sum())
            md.row((p0 + l, z0 + l), (-(a_cpu + a_gpu), U - inst.overhead_us), -md.inf, float(slack))

    def kvec(sol):
        out = []
        for l in range(L):
            kg = int(round(sol[k0 + l]))
            out.append(min(kg * inst.group, inst.freqs[l].size))
        return out

    def start(k):
        v = np.zeros(len(md.lo))
        for l in range(L):
            kg = -(-k[l] // inst.group)
            v[k0 + l] = kg
            v[z0 + l] = 1.0 if k[l] else 0.0
            v[y0 + l] = 1.0 if (short[l] and kg == G[l]) else 0.0
            v[p0 + l] = float(inst.freqs[l][:k[l]].sum())
        return v

    return md, kvec, start


def _model_groups(inst: Instance, highspy, avail: float, balance: str, slack: float, makespan: bool):
    """Group form: binary x_{l,j} with prefix rows, binary z_l; optional t_l for the makespan."""
    L = inst.model.n_layer
    md = _Model(highspy)
    G = [s.size for s in inst.sizes]
    scale = max(avail, 1.0)
    x0 = md.cols(int(sum(G)), 0.0, 1.0, True, np.concatenate([inst.weights[l] * inst.mass[l] for l in range(L)]))
    xoff = x0 + np.concatenate([[0], np.cumsum(G)]).astype(np.int64)
    z0 = md.cols(L, 0.0, [0.0 if inst.min_neurons[l] > inst.freqs[l].size else 1.0 for l in range(L)], True)
    t0 = md.cols(L, 0.0, md.inf, False) if makespan else 0  # t_l only with the makespan
    md.row(range(x0, x0 + int(sum(G))),
           np.concatenate([inst.sizes[l] * inst.model.neuron_bytes[l] for l in range(L)]) / scale,
           -md.inf, avail / scale)
    for l in range(L):
        xs = list(range(int(xoff[l]), int(xoff[l + 1])))
        for j in range(G[l] - 1):
            md.row((xs[j + 1], xs[j]), (1.0, -1.0), -md.inf, 0.0)  # prefix
        md.row((xs[0], z0 + l), (1.0, -1.0), -md.inf, 0.0)  # link
        if inst.min_neurons[l] <= inst.freqs[l].size:
            md.row(xs + [z0 + l], list(inst.sizes[l].astype(float)) + [-float(inst.min_neurons[l])], 0.0, md.inf)
            md.row((xs[inst.min_groups[l] - 1], z0 + l), (1.0, -1.0), 0.0, md.inf)
        a_cpu, a_gpu = _time_coefs(inst, l)
        F = float(inst.mass[l].sum())
        if balance == "constraint":
            md.row(xs + [z0 + l], list(-(a_cpu + a_gpu) * inst.mass[l]) + [a_cpu * F - inst.overhead_us],
                   -md.inf, float(slack))
        if makespan:
            md.row(xs + [t0 + l], list(a_cpu * inst.mass[l]) + [1.0], a_cpu * F, md.inf)  # t >= T_cpu
            md.row(xs + [z0 + l, t0 + l], list(-a_gpu * inst.mass[l]) + [-inst.overhead_us, 1.0], 0.0, md.inf)

    def kvec(sol):
        x = np.asarray(sol) > 0.5
        return [int(inst.sizes[l][x[xoff[l]:xoff[l + 1]]].sum()) for l in range(L)]

    def start(k):
        v = np.zeros(len(md.lo))
        for l in range(L):
            g = -(-k[l] // inst.group)
            v[xoff[l]:xoff[l] + g] = 1.0
            v[z0 + l] = 1.0 if k[l] else 0.0
            if makespan:
                a_cpu, a_gpu = _time_coefs(inst, l)
                F, Fk = float(inst.freqs[l].sum()), float(inst.freqs[l][:k[l]].sum())
                v[t0 + l] = max(a_cpu * (F - Fk), (a_gpu * Fk + inst.overhead_us) if k[l] else 0.0)
        return v

    return md, kvec, start, xoff, t0


FORMULATIONS = ("prefix", "groups")


def solve_ilp(inst: Instance, budget_bytes: float, time_limit: float = 60.0, mip_rel_gap: float = 1e-4,
              threads: int = 0, balance: str = "off", balance_tol: float = 0.0, balance_slack_us: float = 0.0,
              formulation: str = "prefix", warm_start: bool = True) -> Placement:
    """Solve the placement MILP (module docstring) for one budget with HiGHS.

    formulation: "prefix" (integer k_l, the fast default) or "groups" (binary per
    group); both have the same optimum. The makespan stage always uses "groups",
    where the per-layer mass is linear and exact."""
    if balance not in BALANCE:
        raise PlacementError(f"balance must be one of {BALANCE}, got {balance!r}")
    if formulation not in FORMULATIONS:
        raise PlacementError(f"formulation must be one of {FORMULATIONS}, got {formulation!r}")
    if not (0 <= balance_tol < 1):
        raise PlacementError(f"balance_tol must be in [0, 1), got {balance_tol}")
    if not (balance_slack_us >= 0):
        raise PlacementError(f"balance slack must be >= 0, got {balance_slack_us}")
    if not (time_limit > 0):
        raise PlacementError(f"time limit must be > 0, got {time_limit}")
    if not (0 <= mip_rel_gap < 1):
        raise PlacementError(f"MIP gap must be in [0, 1), got {mip_rel_gap}")
    t0 = time.perf_counter()
    avail = _available(inst, budget_bytes)
    L = inst.model.n_layer
    if not inst.hw.has_gpu:
        return _finish(inst, budget_bytes, K.SOLVER_ILP, "cpu-only", [0] * L, 0.0, time.perf_counter() - t0, balance,
                       "no GPU: everything stays on the CPU")
    highspy, h = _highs()
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    h.setOptionValue("mip_abs_gap", 1e-9)
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    h.setOptionValue("mip_feasibility_tolerance", 1e-9)
    if threads:
        h.setOptionValue("threads", int(threads))

    if formulation == "prefix":
        md, kvec, start = _model_prefix(inst, highspy, avail, balance, balance_slack_us)
    else:
        md, kvec, start, _, _ = _model_groups(inst, highspy, avail, balance, balance_slack_us, False)
    md.highs(h, maximize=True)
    greedy = None
    if warm_start and balance != "constraint":  # the greedy placement ignores the balance rows
        greedy = solve_greedy(inst, budget_bytes)
        sol = highspy.HighsSolution()
        sol.col_value = start(greedy.gpu_neurons)
        h.setSolution(sol)
    h.run()
    status = h.modelStatusToString(h.getModelStatus())
    info = h.getInfo()
    if info.primal_solution_status != 2:  # 2: a feasible solution exists
        raise PlacementError(f"HiGHS found no feasible placement (status: {status})")
    k = kvec(list(h.getSolution().col_value))
    gap = float(info.mip_gap)
    note = ""

    if balance == "makespan":
        best = evaluate(inst, k)["objective"]
        t_left = time_limit - (time.perf_counter() - t0)
        if t_left > 0:
            highspy, h = _highs()
            h.setOptionValue("time_limit", float(t_left))
            h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
            h.setOptionValue("primal_feasibility_tolerance", 1e-9)
            h.setOptionValue("mip_feasibility_tolerance", 1e-9)
            if threads:
                h.setOptionValue("threads", int(threads))
            md2, kvec2, start2, xoff, tcol = _model_groups(inst, highspy, avail, balance, balance_slack_us, True)
            nx = int(xoff[-1] - xoff[0])
            obj = np.array(md2.cost[:nx])
            md2.row(range(nx), obj, best * (1 - balance_tol) - 1e-9 * abs(best), md2.inf)  # keep the mass
            md2.cost = [0.0] * len(md2.cost)
            for l in range(L):
                md2.cost[tcol + l] = 1.0
            md2.highs(h, maximize=False)
            s2 = highspy.HighsSolution()
            s2.col_value = start2(k)
            h.setSolution(s2)
            h.run()
            info2 = h.getInfo()
            if info2.primal_solution_status == 2:
                k2 = kvec2(list(h.getSolution().col_value))
                if evaluate(inst, k2)["est_token_ms"] <= evaluate(inst, k)["est_token_ms"]:
                    k = k2
                note = (f"makespan stage: {h.modelStatusToString(h.getModelStatus())}, "
                        f"gap {float(info2.mip_gap):.1e}")
        if not note:
            note = "makespan stage skipped or found nothing: the stage-1 placement is kept"

    # HiGHS works to tolerances: verify exactly, and repair a hair-width budget overshoot should one occur.
    viol = check_placement(inst, k, budget_bytes, balance, balance_slack_us)
    while viol and any("exceed the budget" in v for v in viol):
        cand = [l for l in range(L) if k[l] > 0]
        def last_group_mass(i: int) -> float:
            return inst.weights[i] * float(inst.freqs[i][(k[i] - 1) // inst.group * inst.group:k[i]].sum())

        l = min(cand, key=last_group_mass)
        k[l] = (k[l] - 1) // inst.group * inst.group
        if k[l] < inst.min_neurons[l]:
            k[l] = 0
        viol = check_placement(inst, k, budget_bytes, balance, balance_slack_us)
        note = (note + "; " if note else "") + "repaired a tolerance-level budget overshoot"
    if viol:
        raise PlacementError("internal: the ILP placement violates " + "; ".join(viol[:3]))
    pl = _finish(inst, budget_bytes, K.SOLVER_ILP, status, k, gap, time.perf_counter() - t0, balance, note)
    if greedy is not None and balance == "off" and greedy.objective > pl.objective * (1 + 1e-12):
        # only possible when stopped early (time limit): never return worse than the baseline
        pl = dataclasses.replace(greedy, status=status, time_s=pl.time_s,
                                 note="ILP stopped early with a worse incumbent; greedy kept")
    return pl


def solve(freqs: Sequence, model: ModelDesc, budgets_gib: Sequence[float], hw: Union[str, Hardware] = "rtx4090",
          group: int = 64, ctx: int = 4096, solver: str = K.SOLVER_ILP, **kw) -> List[Placement]:
    """One placement per budget (GiB), sorted by budget. ``kw`` goes to build_instance / solve_ilp."""
    if solver not in SOLVERS:
        raise PlacementError(f"solver must be one of {SOLVERS}, got {solver!r}")
    hw = hardware(hw) if not isinstance(hw, Hardware) else hw
    inst_kw = {k: kw.pop(k) for k in ("weights", "min_neurons", "output_on_gpu", "embd_on_gpu", "reserve_gib", "sort")
               if k in kw}
    inst = build_instance(freqs, model, hw, group=group, ctx=ctx, **inst_kw)
    budgets = sorted(set(_budget_bytes(b) for b in budgets_gib))
    if not budgets:
        raise PlacementError("give at least one budget")
    for b in budgets:
        _available(inst, b)  # fail before solving anything
    out = []
    for b in budgets:
        out.append(solve_ilp(inst, b, **kw) if solver == K.SOLVER_ILP else solve_greedy(inst, b))
    return out


def _budget_bytes(gib) -> int:
    try:
        g = float(gib)
    except (TypeError, ValueError):
        raise PlacementError(f"budget must be a number of GiB, got {gib!r}") from None
    if not math.isfinite(g) or g < 0:
        raise PlacementError(f"budget must be a finite number of GiB >= 0, got {gib!r}")
    return int(round(g * GIB))
