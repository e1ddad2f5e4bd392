"""Parallel slots decoded together: continuous batching over one shared KV cache.

One ``_core.Context`` holds every slot's sequence (sequence id = slot number).
Each slot is a ``pinfer.Llama`` view (``Llama._sequence_view``) whose context is a
:class:`SeqContext`: when the slot's completion code evaluates tokens, they are
handed to the stepper thread, which waits until every busy slot has handed in its
next tokens (or a short grace period has passed), decodes them all in ONE batch,
and hands each slot its logits. A request that arrives joins at the next step; one
that finishes leaves; a cancelled one (client gone) is dropped at the next step.
Everything else a request does (chat template, sampling, stop strings, logprobs,
grammar, result shapes) is pinfer.Llama's own code running in the slot's thread.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Deque, List, Optional

import numpy as np

GRACE_S = 0.010  # longest a step waits for a busy slot that has not handed in its tokens


class Cancelled(Exception):
    """The request was cancelled (its client disconnected, or the server stops)."""


class Busy(Exception):
    """Every slot is busy and the queue is full."""


class _Submission:
    __slots__ = ("seq", "tokens", "pos0", "done", "job", "event", "logits", "error")

    def __init__(self, seq: int, tokens: List[int], pos0: int, job: Optional["Job"]) -> None:
        self.seq, self.tokens, self.pos0, self.job = seq, tokens, pos0, job
        self.done = 0  # tokens already decoded (a long prompt takes several steps)
        self.event = threading.Event()
        self.logits: Optional[np.ndarray] = None
        self.error: Optional[BaseException] = None


class SeqContext:
    """The part of ``_core.Context`` that pinfer.Llama uses, for one sequence of the
    engine's shared context: decode() hands the tokens to the stepper and waits."""

    def __init__(self, engine: "Engine", seq: int, n_ctx: int) -> None:
        self._engine, self._seq, self._n_ctx = engine, seq, n_ctx
        self._n_past = 0
        self._logits: Optional[np.ndarray] = None
        self.job: Optional[Job] = None  # the request running on this sequence
        self.notice = ""

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    def decode(self, tokens: Any, all_logits: bool = False) -> None:
        if all_logits:
            raise ValueError("a server slot keeps the last logits only")
        toks = [int(t) for t in tokens]
        sub = _Submission(self._seq, toks, self._n_past, self.job)
        try:
            self._logits = self._engine._submit(sub)
        except BaseException:
            # a prompt cancelled between its pieces left cells behind: drop them
            self._engine._seq_rm(self._seq, self._n_past)
            raise
        self._n_past += len(toks)

    def logits(self, i: int = -1) -> np.ndarray:
        if self._logits is None or i not in (-1, 0):
            raise ValueError("no logits: nothing decoded on this slot yet")
        return self._logits

    def kv_truncate(self, n_keep: int) -> None:
        self._engine._seq_rm(self._seq, n_keep)
        self._n_past = min(self._n_past, n_keep)

    def reset_timings(self) -> None:
        pass


class Job:
    """One request: ``run(llm)`` is called in a slot's thread with that slot's Llama
    view; ``emit`` receives what it produces (called from that thread). ``cancel``
    (the client left) stops it at its next step, or takes it out of the queue."""

    def __init__(self, run: Callable[[Any], Any], emit: Callable[[str, Any], None],
                 prompt_tokens: Optional[List[int]] = None, cache_prompt: bool = True) -> None:
        self.run, self.emit = run, emit
        self.prompt_tokens = prompt_tokens  # for choosing the slot with the longest cached prefix
        self.cache_prompt = cache_prompt
        self.cancelled = False
        self.engine: Optional["Engine"] = None
        self.t_submit = time.monotonic()

    def cancel(self) -> None:
        self.cancelled = True
        if self.engine is not None:
            self.engine._unqueue(self)


class Slot:
    def __init__(self, engine: "Engine", seq: int, n_ctx: int) -> None:
        self.seq = seq
        self.ctx = SeqContext(engine, seq, n_ctx)
        self.llm = engine.llm._sequence_view(self.ctx)
        self.job: Optional[Job] = None
        self.wake = threading.Condition(engine._lock)


class Engine:
    """N slots over ``llm``'s context (whose n_ctx must hold n_slots * n_ctx_slot cells)."""

    def __init__(self, llm: Any, n_slots: int, n_ctx_slot: int, queue_max: int, n_batch: int,
                 metrics: Any = None) -> None:
        if n_slots < 1 or n_slots > 64:
            raise ValueError(f"--parallel must be in [1, 64], got {n_slots}")
        self.llm = llm
        self._ctx = llm.ctx
        self.n_batch = n_batch
        self.queue_max = queue_max
        self.metrics = metrics
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)   # the stepper waits here for submissions
        self._pending: List[_Submission] = []
        self._waiting: Deque[Job] = collections.deque()
        self._stopping = False
        self._ctx_lock = threading.Lock()  # the shared context: one decode or cache edit at a time
        self.slots = [Slot(self, i, n_ctx_slot) for i in range(n_slots)]
        self._threads = [threading.Thread(target=self._slot_loop, args=(s,), name=f"pinfer-slot-{s.seq}",
                                          daemon=True) for s in self.slots]
        self._stepper = threading.Thread(target=self._step_loop, name="pinfer-stepper", daemon=True)
        for t in self._threads:
            t.start()
        self._stepper.start()

    # ---- admission ----

    def submit(self, job: Job) -> None:
        """Start job on a free slot (the one caching the longest prefix of its prompt),
        or queue it; raises Busy when the queue is full too."""
        with self._lock:
            if self._stopping:
                raise Busy("the server is stopping")
            job.engine = self
            free = [s for s in self.slots if s.job is None]
            if free:
                self._start(self._best_slot(free, job), job)
            elif len(self._waiting) < self.queue_max:
                self._waiting.append(job)
            else:
                raise Busy(f"all {len(self.slots)} slots are busy and {len(self._waiting)} requests are queued")

    @staticmethod
    def _best_slot(free: List[Slot], job: Job) -> Slot:
        key = job.prompt_tokens
        if not key:
            return free[0]

        return max(free, key=lambda s: s.llm.longest_token_prefix(s.llm._input_ids, key))

    def _start(self, slot: Slot, job: Job) -> None:  # with the lock held
        slot.job = job
        slot.ctx.job = job
        slot.wake.notify()

    def _unqueue(self, job: Job) -> None:
        with self._lock:
            if job in self._waiting:
                self._waiting.remove(job)

    @property
    def queue_depth(self) -> int:
        return len(self._waiting)

    @property
    def slots_busy(self) -> int:
        return sum(s.job is not None for s in self.slots)

    def stop(self) -> None:
        """Cancel queued requests, let running ones see Cancelled, stop the threads."""
        with self._lock:
            self._stopping = True
            while self._waiting:
                job = self._waiting.popleft()
                job.cancelled = True  # (not cancel(): the lock is held)
                job.emit("error", Cancelled("the server is stopping"))
            for s in self.slots:
                if s.job is not None:
                    s.job.cancelled = True
                s.wake.notify()
            self._work.notify_all()
        for t in self._threads + [self._stepper]:
            t.join(timeout=5)

    # ---- a slot's thread ----

    def _slot_loop(self, slot: Slot) -> None:
        while True:
            with self._lock:
                while slot.job is None and not self._stopping:
                    slot.wake.wait()
                if slot.job is None:
                    return
                job = slot.job
            try:
                if job.cancelled:
                    raise Cancelled()
                if not job.cache_prompt:
                    slot.llm.reset()
                out = job.run(slot.llm)
                if isinstance(out, dict):
                    job.emit("result", out)
                else:
                    for item in out:
                        if job.cancelled:
                            raise Cancelled()
                        job.emit("chunk", item)
                    job.emit("end", None)
            except Cancelled as e:
                job.emit("error", e)
            except BaseException as e:  # reported to the client; the slot stays usable
                job.emit("error", e)
            finally:
                with self._lock:
                    slot.ctx.job = None
                    slot.job = None
                    if self._waiting and not self._stopping:
                        self._start(slot, self._waiting.popleft())
                    self._work.notify_all()  # one slot fewer to wait for

    # ---- the shared context ----

    def _submit(self, sub: _Submission) -> np.ndarray:
        if sub.job is not None and sub.job.cancelled:
            raise Cancelled()
        with self._lock:
            if self._stopping:
                raise Cancelled("the server is stopping")
            self._pending.append(sub)
            self._work.notify_all()
        sub.event.wait()
        if sub.error is not None:
            raise sub.error
        if sub.logits is None:
            raise RuntimeError("decode step ended without logits")
        return sub.logits

    def _seq_rm(self, seq: int, n_keep: int) -> None:
        with self._ctx_lock:
            self._ctx.seq_rm(seq, n_keep, -1)

    def _step_loop(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._stopping:
                    self._work.wait(0.5)
                if self._stopping:
                    for sub in self._pending:
                        sub.error = Cancelled("the server is stopping")
                        sub.event.set()
                    self._pending = []
                    return
                # wait (briefly) until every busy slot has handed in its tokens
                deadline = time.monotonic() + GRACE_S
                while not self._stopping:
                    busy = sum(s.job is not None for s in self.slots)
                    if len({p.seq for p in self._pending}) >= busy:
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._work.wait(left)
                take, self._pending = self._pending, []
            rest = self._step(take)
            if rest:
                with self._lock:
                    self._pending = rest + self._pending

    def _step(self, subs: List[_Submission]) -> List[_Submission]:
        """Decode one batch from subs (single tokens first, then prompt pieces, up to
        n_batch tokens); returns the submissions with tokens left for the next step."""
        live = []
        for sub in subs:
            if sub.job is not None and sub.job.cancelled:
                sub.error = Cancelled()
                sub.event.set()
            else:
                live.append(sub)
        live.sort(key=lambda s: len(s.tokens) - s.done)
        T: List[int] = []
        P: List[int] = []
        S: List[int] = []
        O: List[int] = []
        ends = []
        rest = []
        for sub in live:
            room = self.n_batch - len(T)
            if room <= 0:
                rest.append(sub)
                continue
            take = min(room, len(sub.tokens) - sub.done)
            a = sub.done
            T += sub.tokens[a:a + take]
            P += range(sub.pos0 + a, sub.pos0 + a + take)
            S += [sub.seq] * take
            last = a + take == len(sub.tokens)
            O += [0] * (take - 1) + [1 if last else 0]
            sub.done += take
            if last:
                ends.append((sub, len(T) - 1))
            else:
                rest.append(sub)
        if not T:
            return rest
        t0 = time.perf_counter()
        try:
            with self._ctx_lock:
                self._ctx.decode_batch(T, P, S, O)
                for sub, i in ends:
                    sub.logits = np.array(self._ctx.logits_ith(i), dtype=np.float32)
        except Exception as e:  # the batch failed: every request in it fails, the server stays up
            for sub in live:
                sub.error = RuntimeError(f"decode failed: {e}")
                sub.event.set()
            return []
        dt = time.perf_counter() - t0
        if self.metrics is not None:
            self.metrics.step(len(T), len(ends), dt)
        for sub, _ in ends:
            sub.event.set()
        return rest
