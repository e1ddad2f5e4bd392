"""The OpenAI-compatible HTTP API over an :class:`~pinfer.server.engine.Engine`.

Errors are OpenAI's JSON (``{"error": {"message", "type", "param", "code"}}``) with
the status that fits: 400 a bad parameter, 401 a missing or wrong API key, 404 an
unknown route or model, 413 a body over the limit, 503 (with Retry-After) when every
slot is busy and the queue is full. A request that raises inside pinfer.Llama is
answered with its message; the server itself keeps running.
"""
from __future__ import annotations

import asyncio
import base64
import hmac
import json
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from sse_starlette.sse import AppStatus, EventSourceResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..types import CreateEmbeddingResponse
from .engine import Busy, Cancelled, Engine, Job
from .metrics import Metrics
from .schemas import ChatRequest, CompletionRequest, DetokenizeRequest, EmbeddingRequest, TokenizeRequest

# Streams run to their end when the server is told to stop (uvicorn drains open
# requests first): a response the server accepted is never cut short.
AppStatus.disable_automatic_graceful_drain()

ROUTES = ("/v1/models", "/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/tokenize",
          "/detokenize", "/health", "/metrics", "/openapi.json", "/docs")
PUBLIC = ("/health",)  # answered without the API key


class Limits:
    def __init__(self, max_body: int = 1 << 20, max_tokens: int = 4096) -> None:
        self.max_body = max_body
        self.max_tokens = max_tokens


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 param: Optional[str] = None, code: Optional[str] = None,
                 headers: Optional[Dict[str, str]] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code, self.headers = (
            status, message, type_, param, code, headers)

    def body(self) -> Dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def _from_exception(e: BaseException) -> ApiError:
    """A pinfer.Llama exception as an API error: argument errors are the client's (400)."""
    if isinstance(e, ApiError):
        return e
    if isinstance(e, Cancelled):
        return ApiError(503, str(e) or "the request was cancelled", "server_error", headers={"Retry-After": "1"})
    if isinstance(e, (ValueError, TypeError, NotImplementedError, KeyError, IndexError)):
        return ApiError(400, str(e) or type(e).__name__)
    return ApiError(500, f"internal error: {type(e).__name__}: {e}", "server_error")


async def _send_error(send: Callable, err: ApiError) -> None:
    body = json.dumps(err.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (err.headers or {}).items()]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI layer in front of the app: API key (constant-time compare), body size
    limit (read and replayed, so no handler sees more), request counts by status."""

    def __init__(self, app: Any, api_key: Optional[str], max_body: int, metrics: Metrics) -> None:
        self.app, self.max_body, self.metrics = app, max_body, metrics
        self.key = api_key.encode() if api_key else None

    async def __call__(self, scope: Dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        route = path if path in ROUTES else ("/v1/models/{id}" if path.startswith("/v1/models/") else "other")
        status = {"code": 0}

        async def counted_send(msg: Dict[str, Any]) -> None:
            if msg["type"] == "http.response.start":
                status["code"] = msg["status"]
            await send(msg)
        try:
            if self.key is not None and path not in PUBLIC:
                auth = dict(scope.get("headers") or []).get(b"authorization", b"")
                given = auth[7:].strip() if auth[:7].lower() == b"bearer " else b""
                if not hmac.compare_digest(given, self.key):
                    return await _send_error(counted_send, ApiError(
                        401, "invalid or missing API key (send 'Authorization: Bearer KEY')",
                        "invalid_request_error", code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}))
            length = dict(scope.get("headers") or []).get(b"content-length")
            too_big = ApiError(413, f"request body larger than {self.max_body} bytes", code="request_too_large")
            if length is not None:
                try:
                    if int(length) > self.max_body:
                        return await _send_error(counted_send, too_big)
                except ValueError:
                    return await _send_error(counted_send, ApiError(400, "bad Content-Length header"))
            body = bytearray()
            if scope.get("method") in ("POST", "PUT", "PATCH"):
                while True:
                    msg = await receive()
                    if msg["type"] == "http.disconnect":
                        return
                    body += msg.get("body", b"")
                    if len(body) > self.max_body:
                        return await _send_error(counted_send, too_big)
                    if not msg.get("more_body"):
                        break
            replayed = False

            async def replay() -> Dict[str, Any]:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": bytes(body), "more_body": False}
                return await receive()
            await self.app(scope, replay, counted_send)
        finally:
            self.metrics.request(route, status["code"])


def create_app(engine: Engine, model_id: str, api_key: Optional[str] = None,
               limits: Optional[Limits] = None, metrics: Optional[Metrics] = None) -> Any:
    """The ASGI application (FastAPI behind the Guard); engine.llm is the served Llama."""
    limits = limits or Limits()
    metrics = metrics or engine.metrics or Metrics()
    llm = engine.llm
    created = int(time.time())
    emb_lock = threading.Lock()

    async def lifespan(app: FastAPI):
        yield
        await run_in_threadpool(engine.stop)

    app = FastAPI(title="pinfer", version="0.1.0", lifespan=lifespan,
                  description="An OpenAI-compatible API over pinfer: parallel slots decoded together.")

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        return ApiError(400, f"{loc}: {first.get('msg', 'invalid request')}" if loc else
                        str(first.get("msg", "invalid request")), param=loc or None).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        msg = f"unknown route {request.method} {request.url.path}" if exc.status_code == 404 else str(exc.detail)
        return ApiError(exc.status_code, msg, code="not_found" if exc.status_code == 404 else None,
                        headers=getattr(exc, "headers", None)).response()

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        return _from_exception(exc).response()

    def check_model(name: Optional[str]) -> None:
        if name is not None and name != model_id:
            raise ApiError(404, f"model '{name}' does not exist: this server serves '{model_id}'",
                           param="model", code="model_not_found")

    def cap_tokens(n: Optional[int]) -> int:
        if n is not None and n > limits.max_tokens:
            raise ApiError(400, f"max_tokens {n} is above this server's limit of {limits.max_tokens}",
                           param="max_tokens")
        return limits.max_tokens if not n else n

    async def next_item(q: "asyncio.Queue", request: Request, job: Job):
        """The job's next item; None when the client went away (the job is cancelled)."""
        while True:
            try:
                return await asyncio.wait_for(q.get(), 0.25)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    job.cancel()
                    return None

    async def run_job(request: Request, run: Callable[[Any], Any], stream: bool,
                      prompt_tokens: Optional[List[int]], cache_prompt: bool):
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()

        def emit(kind: str, item: Any) -> None:
            loop.call_soon_threadsafe(q.put_nowait, (kind, item))
        job = Job(run, emit, prompt_tokens, cache_prompt)
        try:
            engine.submit(job)
        except Busy as e:
            raise ApiError(503, f"server busy: {e}", "server_error", code="server_busy",
                           headers={"Retry-After": "1"}) from None
        first = await next_item(q, request, job)
        if first is None:
            return PlainTextResponse("", status_code=499)  # nobody is listening
        kind, item = first
        if kind == "error":
            raise _from_exception(item)
        if kind == "result":
            metrics.usage(item.get("usage"))
            return JSONResponse(item)

        async def events():
            k, it = kind, item
            try:
                while True:
                    if k == "chunk":
                        if it.get("usage"):
                            metrics.usage(it["usage"])
                        yield json.dumps(it)
                    elif k == "end":
                        yield "[DONE]"
                        return
                    else:  # an error after the stream began: said in the stream, as OpenAI does
                        yield json.dumps(_from_exception(it).body())
                        return
                    k, it = await q.get()
            finally:
                job.cancel()  # the client left (or we are done): the slot is freed at the next step
        return EventSourceResponse(events(), ping=15)

    def tokens_of(text: Any) -> Optional[List[int]]:
        try:
            return llm.tokenize(text.encode() if isinstance(text, str) else text, True, True)
        except Exception:
            return None  # the slot's own code reports the problem

    # ---- routes ----

    @app.get("/health")
    async def health() -> Dict[str, Any]:
        return {"status": "ok", "slots_idle": len(engine.slots) - engine.slots_busy,
                "slots_processing": engine.slots_busy, "queue_depth": engine.queue_depth}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def get_metrics() -> PlainTextResponse:
        return PlainTextResponse(metrics.render(len(engine.slots), engine.slots_busy, engine.queue_depth),
                                 media_type="text/plain; version=0.0.4")

    def model_card() -> Dict[str, Any]:
        return {"id": model_id, "object": "model", "created": created, "owned_by": "pinfer",
                "meta": {"n_ctx_slot": engine.slots[0].ctx.n_ctx, "n_slots": len(engine.slots),
                         "n_vocab": llm.n_vocab(), "n_embd": llm.n_embd(), "desc": llm.model.desc}}

    @app.get("/v1/models")
    async def models() -> Dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{name:path}")
    async def model(name: str) -> Dict[str, Any]:
        check_model(name)
        return model_card()

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        check_model(req.model)
        prompt: Any = req.prompt
        if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            if len(prompt) != 1:
                raise ApiError(400, "one prompt per request (a list of several texts is not supported)",
                               param="prompt")
            prompt = prompt[0]
        kw = dict(max_tokens=cap_tokens(req.max_tokens), temperature=req.temperature, top_p=req.top_p,
                  min_p=req.min_p, top_k=req.top_k, stop=req.stop, seed=req.seed,
                  frequency_penalty=req.frequency_penalty, presence_penalty=req.presence_penalty,
                  repeat_penalty=req.repeat_penalty, logprobs=req.logprobs, echo=req.echo, stream=req.stream,
                  logit_bias=req.logit_bias, model=model_id)
        if req.suffix is not None:
            kw["suffix"] = req.suffix  # pinfer.Llama says what it does with it
        key = tokens_of(prompt) if isinstance(prompt, str) else list(prompt)
        return await run_job(request, lambda view: view.create_completion(prompt, **kw), req.stream, key,
                             req.cache_prompt)

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: Request):
        check_model(req.model)
        messages = [m.model_dump(exclude_none=True) for m in req.messages]
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        kw: Dict[str, Any] = dict(
            max_tokens=cap_tokens(max_tokens), temperature=req.temperature, top_p=req.top_p, min_p=req.min_p,
            top_k=req.top_k, stop=req.stop, seed=req.seed, frequency_penalty=req.frequency_penalty,
            presence_penalty=req.presence_penalty, repeat_penalty=req.repeat_penalty, stream=req.stream,
            logit_bias=req.logit_bias, logprobs=req.logprobs, top_logprobs=req.top_logprobs,
            response_format=req.response_format, model=model_id)
        for name in ("tools", "tool_choice"):  # pinfer.Llama refuses them by name while unsupported
            if getattr(req, name) is not None:
                kw[name] = getattr(req, name)
        try:
            key = tokens_of(llm.apply_chat_template(messages, True))
        except Exception:
            key = None
        return await run_job(request, lambda view: view.create_chat_completion(messages, **kw), req.stream,
                             key, req.cache_prompt)

    @app.post("/v1/embeddings")
    async def embeddings(req: EmbeddingRequest) -> CreateEmbeddingResponse:
        check_model(req.model)
        if llm._ectx is None:
            raise ApiError(400, "this server runs without embeddings (started with --no-embeddings)")
        if req.dimensions is not None and req.dimensions != llm.n_embd():
            raise ApiError(400, f"dimensions: this model's embeddings have {llm.n_embd()}", param="dimensions")
        if isinstance(req.input, list) and not req.input:
            raise ApiError(400, "input is empty", param="input")

        def work() -> CreateEmbeddingResponse:
            with emb_lock:
                return llm.create_embedding(req.input, model=model_id, normalize=True, truncate=False)
        try:
            out = await run_in_threadpool(work)
        except Exception as e:
            raise _from_exception(e) from None
        if req.encoding_format == "base64":
            for d in out["data"]:
                d["embedding"] = base64.b64encode(np.asarray(d["embedding"], dtype="<f4").tobytes()).decode()
        metrics.usage(out["usage"])
        return out

    @app.post("/tokenize")
    async def tokenize(req: TokenizeRequest) -> Dict[str, Any]:
        toks = llm.tokenize(req.content.encode("utf-8", errors="surrogatepass"), req.add_special, True)
        if not req.with_pieces:
            return {"tokens": toks}
        return {"tokens": [{"id": t, "piece": llm.model.token_to_piece(t, True).decode("utf-8", errors="replace")}
                           for t in toks]}

    @app.post("/detokenize")
    async def detokenize(req: DetokenizeRequest) -> Dict[str, Any]:
        try:
            text = llm.detokenize(req.tokens, special=True)
        except (ValueError, TypeError) as e:
            raise ApiError(400, str(e), param="tokens") from None
        return {"content": text.decode("utf-8", errors="replace")}

    return Guard(app, api_key, limits.max_body, metrics)
