"""``pinfer serve`` / ``python -m pinfer.server``: options, start-up and a clean stop."""
from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import List, Optional

MISSING_EXTRA = "pinfer serve needs the server extra: pip install 'pinfer[server]' (fastapi, uvicorn, sse-starlette)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--model", default=None, help="GGUF model file (default: the embedded default model)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    p.add_argument("-np", "--parallel", type=int, default=4, help="slots decoded together (default 4)")
    p.add_argument("-c", "--ctx-size", type=int, default=0,
                   help="context per slot in tokens (default 0: the model's training context, at most 4096)")
    p.add_argument("-b", "--batch-size", type=int, default=512, help="tokens per decode step at most (default 512)")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: all cores)")
    p.add_argument("--sparse", default="off", choices=["off", "exact", "predictor", "threshold", "auto"],
                   help="sparse FFN mode (default off)")
    p.add_argument("--precision", default="high", choices=["high", "fast"], help="activation precision")
    p.add_argument("--device", default="auto", help="auto (default: cuda if there is one, else cpu), cpu, sim, cuda")
    p.add_argument("-ngl", "--n-gpu-layers", type=int, default=None, help="layers on the device")
    p.add_argument("--vram-budget", type=float, default=None, help="GiB of device memory the plan may use")
    p.add_argument("--api-key", default=os.environ.get("PINFER_API_KEY"),
                   help="require 'Authorization: Bearer KEY' (default: $PINFER_API_KEY; none: no check)")
    p.add_argument("--alias", default=None, help="the model id clients use (default: the file name)")
    p.add_argument("--queue", type=int, default=16, help="requests that may wait for a slot before 503 (default 16)")
    p.add_argument("--max-tokens", type=int, default=0,
                   help="largest max_tokens a request may ask for (default 0: the slot context)")
    p.add_argument("--max-body", type=int, default=1 << 20, help="largest request body in bytes (default 1 MiB)")
    p.add_argument("--no-embeddings", dest="embeddings", action="store_false",
                   help="no embedding context (/v1/embeddings answers 400; saves its KV cache)")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="OpenAI-compatible HTTP server (needs the server extra)",
                       description="An OpenAI-compatible server: /v1/completions, /v1/chat/completions, "
                                   "/v1/embeddings, /v1/models, /tokenize, /detokenize, /health, /metrics. "
                                   "--parallel slots are decoded together in one batch per step.")
    add_arguments(p)
    p.set_defaults(func=main)


def _check(args: argparse.Namespace) -> None:
    for name, lo, hi in (("port", 0, 65535), ("parallel", 1, 64), ("ctx_size", 0, 1 << 20),
                         ("batch_size", 1, 1 << 16), ("queue", 0, 1 << 16), ("max_tokens", 0, 1 << 24),
                         ("max_body", 1024, 1 << 30)):
        v = getattr(args, name)
        if not lo <= v <= hi:
            raise ValueError(f"--{name.replace('_', '-')} must be in [{lo}, {hi}], got {v}")
    if args.api_key is not None and not args.api_key:
        raise ValueError("--api-key is empty")


def build(args: argparse.Namespace):
    """(asgi app, engine, model id) for the options: loads the model."""
    try:
        import fastapi  # noqa: F401
        import sse_starlette  # noqa: F401
    except ImportError:
        raise RuntimeError(MISSING_EXTRA) from None
    from .. import _core
    from ..llama import Llama, default_model_path
    from .app import Limits, create_app
    from .engine import Engine
    from .metrics import Metrics

    _check(args)
    path = args.model or default_model_path()
    if not os.path.exists(path):
        raise FileNotFoundError(f"model file '{path}' does not exist")
    n_ctx_slot = args.ctx_size
    if n_ctx_slot == 0:
        m = _core.Model(path)
        n_ctx_slot = min(m.n_ctx_train or 4096, 4096)
        m.close()
    llm = Llama(path, n_ctx=n_ctx_slot * args.parallel, n_batch=args.batch_size, n_threads=args.threads,
                sparse=args.sparse, precision=args.precision, device=args.device,
                n_gpu_layers=args.n_gpu_layers, vram_budget=args.vram_budget, embedding=args.embeddings)
    metrics = Metrics()
    engine = Engine(llm, args.parallel, n_ctx_slot, args.queue, args.batch_size, metrics)
    model_id = args.alias or os.path.basename(path)
    limits = Limits(max_body=args.max_body, max_tokens=args.max_tokens or n_ctx_slot)
    return create_app(engine, model_id, args.api_key, limits, metrics), engine, model_id


def main(args: argparse.Namespace) -> int:
    """`pinfer serve`: serve until SIGINT / SIGTERM."""
    try:
        import uvicorn
    except ImportError:
        raise RuntimeError(MISSING_EXTRA) from None
    app, engine, model_id = build(args)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, lifespan="on",
                            timeout_graceful_shutdown=None)
    server = uvicorn.Server(config)
    # uvicorn stops gracefully on SIGINT/SIGTERM (open requests finish first) and then
    # raises the signal again: that second one must not turn a clean stop into an error.
    quiet = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGINT, signal.SIGTERM)}
    print(f"pinfer serve: {model_id} on http://{args.host}:{args.port} ({len(engine.slots)} slots of "
          f"{engine.slots[0].ctx.n_ctx} tokens)", file=sys.stderr, flush=True)
    try:
        server.run()
    finally:
        engine.stop()
        for s, h in quiet.items():
            signal.signal(s, h)
    if not server.started:
        raise RuntimeError(f"could not serve on {args.host}:{args.port} (see the message above)")
    print("pinfer serve: stopped", file=sys.stderr, flush=True)
    return 0


def standalone(argv: Optional[List[str]] = None) -> int:
    """`python -m pinfer.server`: the same options, errors as one line and exit 1."""
    p = argparse.ArgumentParser(prog="python -m pinfer.server", description="pinfer's OpenAI-compatible server")
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return main(args)
    except (RuntimeError, ValueError, OSError) as e:
        print(f"pinfer serve: error: {e}", file=sys.stderr)
        return 1
