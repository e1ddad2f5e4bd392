"""`pinfer serve` as a client sees it: a real server on 127.0.0.1 (a subprocess on a
free port) running the embedded default model, driven by the `openai` client and
by raw HTTP. References: pinfer.Llama in this process (one sequence, no server) for
texts and embeddings, and the same requests run one at a time for concurrency."""
import json
import signal
import threading
import time

import httpx
import numpy as np
import openai  # the test extra has it, with schemathesis and the server extra
import pytest

from pinfer import Llama
from serverutil import Server

MODEL = "pinfer-default.gguf"
PROMPTS = ["It is a truth universally acknowledged", "Mr. Darcy", "She was", "The weather at Longbourn",
           "Elizabeth said", "In the morning", "Her mother", "Lady Catherine"]


@pytest.fixture(scope="module")
def srv():
    s = Server(["-np", "4", "--queue", "4", "-c", "256", "-t", "2"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def local():
    with Llama(n_ctx=256, n_threads=2, embedding=True) as llm:
        yield llm


def metric(srv, name):
    for line in httpx.get(srv.url + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


def test_models_health_and_completion(client, srv, local):
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert httpx.get(srv.url + "/health").json()["status"] == "ok"
    r = client.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=16, temperature=0)
    ref = local(PROMPTS[0], max_tokens=16, temperature=0)
    assert r.choices[0].text == ref["choices"][0]["text"]
    assert r.usage.completion_tokens == ref["usage"]["completion_tokens"]
    assert r.object == "text_completion" and r.choices[0].finish_reason == "length"


def test_chat_stream_equals_chat(client, local):
    msgs = [{"role": "user", "content": "Who is Mr. Bingley?"}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=20, temperature=0, seed=1)
    ref = local.create_chat_completion(msgs, max_tokens=20, temperature=0)
    assert r.choices[0].message.content == ref["choices"][0]["message"]["content"]
    assert r.choices[0].message.role == "assistant"
    parts, finish = [], None
    for ch in client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=20, temperature=0,
                                             stream=True):
        d = ch.choices[0].delta
        parts.append(d.content or "")
        finish = ch.choices[0].finish_reason or finish
    assert "".join(parts) == r.choices[0].message.content and finish == r.choices[0].finish_reason


def test_stop_logprobs_and_json_format(client):
    r = client.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=16, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 16 and all(v <= 0 for v in lp.token_logprobs)
    cut = r.choices[0].text[5:9]
    s = client.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=16, temperature=0, stop=[cut])
    assert s.choices[0].text == r.choices[0].text[:r.choices[0].text.index(cut)]
    assert s.choices[0].finish_reason == "stop"
    schema = {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["age"], "additionalProperties": False}
    j = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "How old?"}],
                                       max_tokens=40, response_format={"type": "json_schema", "json_schema": {
                                           "name": "age", "schema": schema}})
    assert j.choices[0].finish_reason == "stop"
    v = json.loads(j.choices[0].message.content)
    assert set(v) == {"age"} and 0 <= v["age"] <= 99


def test_embeddings_match_llama(client, local):
    texts = ["Pride and Prejudice", "a single man in possession of a good fortune"]
    r = client.embeddings.create(model=MODEL, input=texts)  # the client asks for base64 and decodes it
    ref = local.embed(texts, normalize=True)
    for d, v in zip(r.data, ref):
        np.testing.assert_allclose(d.embedding, v, atol=1e-5)
    assert r.usage.prompt_tokens == sum(len(local.tokenize(t.encode())) for t in texts)
    f = httpx.post(client.base_url.join("embeddings").__str__(), json={"input": "x", "encoding_format": "float"})
    np.testing.assert_allclose(f.json()["data"][0]["embedding"], local.embed("x", normalize=True), atol=1e-5)


def test_tokenize_detokenize(srv, local):
    t = httpx.post(srv.url + "/tokenize", json={"content": "Mr. Darcy"}).json()["tokens"]
    assert t == local.tokenize(b"Mr. Darcy", add_bos=False, special=True)
    text = httpx.post(srv.url + "/detokenize", json={"tokens": t}).json()["content"]
    assert text == local.detokenize(t, special=True).decode() and text.strip() == "Mr. Darcy"


def error_of(resp, status):
    assert resp.status_code == status, resp.text
    e = resp.json()["error"]
    assert set(e) == {"message", "type", "param", "code"} and e["message"]
    return e


def test_error_statuses(srv, client):
    u = srv.url
    error_of(httpx.get(u + "/v1/nothing"), 404)
    assert "model" in error_of(httpx.post(u + "/v1/completions", json={"model": "gpt-4", "prompt": "x"}),
                               404)["message"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.completions.create(model=MODEL, prompt="x", temperature=-1)
    error_of(httpx.post(u + "/v1/completions", content=b"{not json", headers={"content-type": "application/json"}),
             400)
    assert error_of(httpx.post(u + "/v1/completions", json={"prompt": "x", "bogus": 1}), 400)["param"] == "bogus"
    error_of(httpx.post(u + "/v1/completions", json={"prompt": "x", "max_tokens": 100000}), 400)
    assert "too long" in error_of(httpx.post(u + "/v1/completions", json={"prompt": list(range(300))}),
                                  400)["message"]
    assert "tool" in error_of(httpx.post(u + "/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}), 400)["message"]
    error_of(httpx.post(u + "/v1/completions", content=b"x" * (1 << 21)), 413)
    error_of(httpx.post(u + "/detokenize", json={"tokens": [10 ** 6]}), 400)
    assert httpx.get(u + "/health").status_code == 200  # still up


def run_alone_and_together(client, prompts, n_tokens):
    def one(p):
        text = "".join(c.choices[0].text for c in client.completions.create(
            model=MODEL, prompt=p, max_tokens=n_tokens, temperature=0, stream=True))
        return text
    alone = [one(p) for p in prompts]
    together = [None] * len(prompts)
    errors = []

    def worker(i):
        try:
            together[i] = one(prompts[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return alone, together


def test_eight_concurrent_streams_equal_alone(client, srv):
    steps0 = metric(srv, "pinfer_batch_steps_total")
    toks0 = metric(srv, "pinfer_batch_tokens_total")
    alone, together = run_alone_and_together(client, PROMPTS, 24)
    assert all(t for t in together) and together == alone
    # the concurrent half was batched: fewer steps than tokens evaluated
    steps = metric(srv, "pinfer_batch_steps_total") - steps0
    toks = metric(srv, "pinfer_batch_tokens_total") - toks0
    assert toks / steps > 1.3
    assert metric(srv, "pinfer_slots_total") == 4


def test_hybrid_sparse_server_matches_cpu(srv):
    """The engine options reach the shared context: on the simulated device with a
    10 MiB budget (part of the 15 MiB model), in exact sparse mode, 4 concurrent
    greedy completions equal the plain CPU server's."""
    def texts(url):
        out = [None] * 4

        def one(i):
            out[i] = httpx.post(url + "/v1/completions", json={"prompt": PROMPTS[i], "max_tokens": 20,
                                                               "temperature": 0}, timeout=120).json()
        th = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in th:
            t.start()
        for t in th:
            t.join(120)
        return [o["choices"][0]["text"] for o in out]
    s = Server(["-np", "4", "-c", "128", "-t", "1", "--device", "sim", "--vram-budget", "0.01",
                "--sparse", "exact", "--no-embeddings"])
    try:
        assert texts(s.url) == texts(srv.url)
    finally:
        s.stop()


def test_busy_then_disconnect_frees_slots(srv):
    """12 long streams at once: 4 run, 4 wait, 4 get 503 with Retry-After; the 8
    accepted clients leave after their first chunk, and their slots are freed at
    once instead of generating the 200 tokens asked for."""
    toks0 = metric(srv, "pinfer_batch_tokens_total")
    statuses, lock = [], threading.Lock()
    barrier = threading.Barrier(12)

    def worker(i):
        body = {"prompt": PROMPTS[i % 8], "max_tokens": 200, "temperature": 0, "stream": True}
        with httpx.Client(timeout=60) as c:
            barrier.wait()
            with c.stream("POST", srv.url + "/v1/completions", json=body) as r:
                with lock:
                    statuses.append((r.status_code, r.headers.get("retry-after")))
                if r.status_code == 200:
                    for line in r.iter_lines():
                        if line.startswith("data:"):
                            break  # first chunk read: hang up
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    busy = [s for s in statuses if s[0] == 503]
    assert len([s for s in statuses if s[0] == 200]) >= 8 and busy and all(s[1] == "1" for s in busy)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        h = httpx.get(srv.url + "/health").json()
        if h["slots_processing"] == 0 and h["queue_depth"] == 0:
            break
        time.sleep(0.05)
    assert h["slots_processing"] == 0 and h["queue_depth"] == 0
    assert metric(srv, "pinfer_batch_tokens_total") - toks0 < 8 * 200 / 2


def test_prompt_prefix_is_reused(srv, local):
    """A follow-up that extends an earlier prompt evaluates only its new tokens (the
    slot holding the prefix is chosen); cache_prompt=false evaluates all of them."""
    base = "Chapter the first. " + " ".join(PROMPTS) + " and so on, said Mrs. Bennet to her husband"
    n = len(local.tokenize(base.encode()))

    def evaluated(prompt, **kw):
        t0 = metric(srv, "pinfer_batch_tokens_total")
        httpx.post(srv.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 1, **kw}, timeout=60)
        return metric(srv, "pinfer_batch_tokens_total") - t0
    assert evaluated(base) >= n - 1  # (a BOS token may be shared)
    assert evaluated(base + " one day") < n / 4
    assert evaluated(base + " one day", cache_prompt=False) >= n - 1


def test_metrics_text(srv):
    text = httpx.get(srv.url + "/metrics").text
    for name in ("pinfer_requests_total", "pinfer_completion_tokens_total", "pinfer_queue_depth",
                 "pinfer_slots_busy", "pinfer_tokens_per_second"):
        assert f"# TYPE {name}" in text
    assert 'route="/v1/completions",status="200"' in text


def test_bad_options_are_errors(capsys):
    from pinfer.server.cli import standalone as main
    assert main(["--parallel", "0"]) == 1
    assert "--parallel must be in [1, 64]" in capsys.readouterr().err
    assert main(["-m", "/nonexistent/model.gguf"]) == 1
    assert "does not exist" in capsys.readouterr().err


@pytest.fixture(scope="module")
def locked():
    s = Server(["-np", "1", "--queue", "0", "-c", "128", "-t", "1", "--max-tokens", "8", "--max-body", "65536",
                "--no-embeddings"], api_key="s3cret")
    yield s
    s.stop()


def test_api_key(locked):
    u = locked.url
    e = error_of(httpx.get(u + "/v1/models"), 401)
    assert e["code"] == "invalid_api_key"
    error_of(httpx.get(u + "/v1/models", headers={"Authorization": "Bearer s3cre"}), 401)
    error_of(httpx.get(u + "/v1/models", headers={"Authorization": "Basic s3cret"}), 401)
    assert httpx.get(u + "/health").status_code == 200
    c = openai.OpenAI(base_url=u + "/v1", api_key="s3cret", max_retries=0)
    assert c.completions.create(model=MODEL, prompt="She", max_tokens=4).usage.completion_tokens <= 4
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=u + "/v1", api_key="wrong", max_retries=0).models.list()
    with pytest.raises(openai.BadRequestError, match="embeddings"):
        c.embeddings.create(model=MODEL, input="x")


def test_schemathesis_finds_no_server_error(locked, tmp_path):
    """Property-based requests from /openapi.json (bounded: 18 per operation, on
    loopback); no response may be a 5xx."""
    import subprocess
    import sys
    st = [sys.executable, "-c", "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())"]
    r = subprocess.run(st + ["run", locked.url + "/openapi.json", "--checks", "not_a_server_error",
                        "--max-examples", "18", "--phases", "examples,fuzzing", "--seed", "1",
                        "--generation-database", "none", "--request-timeout", "30",
                        "-H", "Authorization: Bearer s3cret"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " 0 passed" not in r.stdout, r.stdout[-2000:]
    assert httpx.get(locked.url + "/health").status_code == 200


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly_without_losing_accepted_requests(sig):
    s = Server(["-np", "2", "--queue", "2", "-c", "128", "-t", "2"])
    results, errors = [], []

    def worker(i, stream):
        try:
            body = {"prompt": PROMPTS[i], "max_tokens": 48, "temperature": 0, "stream": stream}
            with httpx.Client(timeout=60) as c:
                if not stream:
                    results.append(c.post(s.url + "/v1/completions", json=body).json()["usage"]["completion_tokens"])
                    return
                n, done = 0, False
                with c.stream("POST", s.url + "/v1/completions", json=body) as r:
                    for line in r.iter_lines():
                        if line == "data: [DONE]":
                            done = True
                        elif line.startswith("data:"):
                            n = json.loads(line[5:]).get("usage", {}).get("completion_tokens", n)
                results.append(n if done else -1)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(i, i % 2 == 0)) for i in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # all four accepted: two running, two queued
        h = httpx.get(s.url + "/health").json()
        if h["slots_processing"] + h["queue_depth"] == 4:
            break
        time.sleep(0.005)
    assert h["slots_processing"] + h["queue_depth"] == 4, h
    rc = s.stop(sig)
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(results) == [48] * 4  # 2 running and 2 queued: all answered in full
    assert rc == 0, s.output()
