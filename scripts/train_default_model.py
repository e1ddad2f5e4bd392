#!/usr/bin/env python3
"""Train pinfer's small embedded default model on Jane Austen, on the CPU.

The model exists to show what pinfer is for: a llama-architecture decoder whose FFN is
ReGLU, relu(gate_proj(x)) * up_proj(x) (ReluLLaMA-style). Hugging Face's
LlamaForCausalLM with hidden_act="relu" computes exactly that, so the output directory
is an ordinary HF llama checkpoint that `pinfer convert` turns into GGUF.

Steps (all under --out):
  1. text: the six novels from pinfer.datasets.austen_books(); hard-wrapped lines are
     joined into paragraphs, one paragraph per line. One chapter (--heldout, default
     Persuasion chapter 23) is removed from the training text and kept for evaluation.
  2. tokenizer: SentencePiece BPE with byte fallback, llama-style (identity normalizer,
     dummy prefix, whitespace kept, digits split), trained on the training text only.
  3. model: LlamaForCausalLM(hidden_act="relu", tied embeddings), AdamW, gradient
     clipping, linear warm-up then cosine decay over the wall-clock budget (--minutes):
     the schedule is a function of elapsed time, so training ends on time at the floor LR.
  4. checkpoints (model + optimizer + curve) every --ckpt-minutes into <out>/ckpt.pt;
     --resume continues from it with the remaining budget. At the end the HF directory
     (config.json, model.safetensors, tokenizer.model, tokenizer_config.json) is written
     to <out>/hf.

The report (held-out perplexity, FFN sparsity, neuron concentration, training curve) is
made by scripts/report_default_model.py from <out>/hf and <out>/curve.json.

Example:
  python scripts/train_default_model.py --out /work/embed-out --minutes 55
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_datasets_module():
    """pinfer.datasets without running pinfer/__init__ (which needs the built _core)."""
    import types

    if "pinfer" not in sys.modules:  # a bare package: its submodules import, __init__ does not run
        pkg = types.ModuleType("pinfer")
        pkg.__path__ = [os.path.join(REPO, "python", "pinfer")]
        sys.modules["pinfer"] = pkg
    return importlib.import_module("pinfer.datasets")


# ------------------------------------------------------------------ text --------

CHAPTER_RE = re.compile(r"^chapter\s+([0-9IVXLC]+)\b", re.IGNORECASE)


def paragraphs(text: str) -> list[str]:
    """Hard-wrapped book lines -> paragraphs (blank lines separate paragraphs)."""
    out, cur = [], []
    for line in text.split("\n"):
        s = line.strip()
        if s:
            cur.append(s)
        elif cur:
            out.append(" ".join(cur))
            cur = []
    if cur:
        out.append(" ".join(cur))
    return out


def split_heldout(books: dict, spec: str):
    """spec 'Title:N' -> (train_texts {title: text}, heldout_text). A chapter runs from its
    'Chapter N' heading to the next chapter heading (or the end of the book)."""
    title, _, num = spec.rpartition(":")
    if title not in books:
        raise SystemExit(f"--heldout: no book {title!r}; have {sorted(books)}")
    paras = paragraphs(books[title])
    starts = [i for i, p in enumerate(paras) if CHAPTER_RE.match(p)]
    hit = [i for i in starts if CHAPTER_RE.match(paras[i]).group(1) == num]
    if len(hit) != 1:
        raise SystemExit(f"--heldout: chapter {num} of {title!r} found {len(hit)} times")
    a = hit[0]
    later = [i for i in starts if i > a]
    b = later[0] if later else len(paras)
    heldout = "\n".join(paras[a:b]) + "\n"
    train = {}
    for t, text in books.items():
        ps = paragraphs(text)
        if t == title:
            ps = ps[:a] + ps[b:]
        train[t] = "\n".join(ps) + "\n"
    return train, heldout


# ------------------------------------------------------------- tokenizer --------

def train_tokenizer(train_texts: dict, out_dir: str, vocab: int) -> str:
    import sentencepiece as spm
    os.makedirs(out_dir, exist_ok=True)
    corpus = os.path.join(out_dir, "tokenizer-train.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for text in train_texts.values():
            f.write(text)
    prefix = os.path.join(out_dir, "tokenizer")
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=prefix, vocab_size=vocab, model_type="bpe",
        byte_fallback=True, character_coverage=1.0,
        # llama-style: text is kept as is (newline -> <0x0A> byte piece), "▁" dummy prefix
        normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, split_digits=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        max_sentence_length=1 << 16, num_threads=2, minloglevel=2)
    return prefix + ".model"


def encode(sp, text: str) -> list[int]:
    return sp.encode(text, out_type=int)


# ----------------------------------------------------------------- model --------

def make_config(args, vocab: int):
    from transformers import LlamaConfig
    return LlamaConfig(
        vocab_size=vocab, hidden_size=args.d, intermediate_size=args.ff,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads or args.heads, head_dim=args.d // args.heads,
        hidden_act="relu",  # LlamaMLP: down(act(gate(x)) * up(x)) -> ReGLU
        max_position_embeddings=args.ctx, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
        bos_token_id=1, eos_token_id=2, initializer_range=0.02, use_cache=True,
        torch_dtype="float32")


def lr_at(frac: float, args) -> float:
    """Warm-up over the first --warmup fraction of the budget, then cosine to --min-lr."""
    if frac < args.warmup:
        return args.lr * max(frac / args.warmup, 0.01)
    p = min((frac - args.warmup) / max(1e-9, 1 - args.warmup), 1.0)
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * p))


def heldout_loss(model, ids, ctx: int, autocast: bool) -> float:
    """Mean next-token cross-entropy over the held-out tokens, in non-overlapping
    windows of ctx tokens (each window starts from an empty context)."""
    import torch
    model.eval()
    tot, n = 0.0, 0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        for s in range(0, len(ids) - 1, ctx):
            x = torch.tensor(ids[s:s + ctx + 1]).unsqueeze(0)
            if x.shape[1] < 2:
                break
            logits = model(input_ids=x[:, :-1]).logits.float()
            loss = torch.nn.functional.cross_entropy(logits[0], x[0, 1:], reduction="sum")
            tot += loss.item()
            n += x.shape[1] - 1
    model.train()
    return tot / n


def save_hf(model, sp_model: str, hf_dir: str, args):
    import shutil
    os.makedirs(hf_dir, exist_ok=True)
    model.save_pretrained(hf_dir, safe_serialization=True)
    shutil.copyfile(sp_model, os.path.join(hf_dir, "tokenizer.model"))
    tok_cfg = {
        "tokenizer_class": "LlamaTokenizer",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None,
        "add_bos_token": True, "add_eos_token": False, "legacy": True,
        "model_max_length": args.ctx, "clean_up_tokenization_spaces": False,
        # The model is a plain Austen language model, not instruction-tuned: the template
        # just concatenates the turns so a prompt continues as prose.
        "chat_template": "{{ bos_token }}{% for m in messages %}{{ m['content'] }}\n{% endfor %}",
    }
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=2)
    with open(os.path.join(hf_dir, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, f, indent=2)


# ------------------------------------------------------------------ main --------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/work/embed-out", help="output directory (outside the repo)")
    ap.add_argument("--minutes", type=float, default=55.0, help="wall-clock training budget")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=0, help="0: same as --heads (no GQA)")
    ap.add_argument("--ff", type=int, default=1536)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=float, default=0.05, help="warm-up, as a fraction of the budget")
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--bf16", choices=["auto", "on", "off"], default="on",
                    help="bf16 autocast; auto measures a few steps both ways and picks the faster")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-minutes", type=float, default=5.0)
    ap.add_argument("--heldout", default="Persuasion:23", help="held-out chapter, 'Title:N'")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resume", action="store_true", help="continue from <out>/ckpt.pt")
    args = ap.parse_args()

    import numpy as np
    import sentencepiece as spm
    import torch
    from tqdm import tqdm
    from transformers import LlamaForCausalLM

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.out, exist_ok=True)
    ckpt_path = os.path.join(args.out, "ckpt.pt")
    curve_path = os.path.join(args.out, "curve.json")
    hf_dir = os.path.join(args.out, "hf")

    # data + tokenizer
    ds = load_datasets_module()
    books = ds.austen_books()
    train_texts, heldout_text = split_heldout(books, args.heldout)
    with open(os.path.join(args.out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(heldout_text)
    tok_dir = os.path.join(args.out, "tokenizer")
    sp_model = os.path.join(tok_dir, "tokenizer.model")
    if not (args.resume and os.path.exists(sp_model)):
        sp_model = train_tokenizer(train_texts, tok_dir, args.vocab)
    sp = spm.SentencePieceProcessor(model_file=sp_model)
    # each book: <s> text </s>, concatenated into one stream that windows are drawn from
    stream = []
    for text in train_texts.values():
        stream += [sp.bos_id()] + encode(sp, text) + [sp.eos_id()]
    train_ids = torch.tensor(stream, dtype=torch.long)
    held_ids = [sp.bos_id()] + encode(sp, heldout_text)
    print(f"train tokens {len(train_ids):,}  held-out tokens {len(held_ids):,}  "
          f"chars/token {sum(map(len, train_texts.values())) / len(train_ids):.2f}", flush=True)

    cfg = make_config(args, sp.get_piece_size())
    model = LlamaForCausalLM(cfg)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters {n_params / 1e6:.2f}M (tied embeddings)", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    def batch():
        starts = rng.integers(0, len(train_ids) - args.ctx - 1, size=args.batch)
        x = torch.stack([train_ids[s:s + args.ctx + 1] for s in starts])
        return x[:, :-1], x[:, 1:]

    def step(autocast: bool) -> float:
        x, y = batch()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        return loss.item()

    state = {"step": 0, "elapsed": 0.0, "tokens": 0, "curve": [], "bf16": None}
    if args.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        state = ck["state"]
        rng = np.random.default_rng(args.seed + state["step"])
        print(f"resumed at step {state['step']}, {state['elapsed'] / 60:.1f} min elapsed", flush=True)

    budget = args.minutes * 60.0
    if state["bf16"] is None:
        if args.bf16 == "auto":
            # a few warm-up-LR steps each way (they count as training and against the budget)
            for g in opt.param_groups:
                g["lr"] = lr_at(0.0, args)
            rate = {}
            t_start = time.time()
            for ac in (False, True, False, True):
                t0 = time.time()
                for _ in range(2):
                    step(ac)
                    state["step"] += 1
                    state["tokens"] += args.batch * args.ctx
                rate[ac] = max(rate.get(ac, 0.0), 2 * args.batch * args.ctx / (time.time() - t0))
            state["elapsed"] += time.time() - t_start
            state["bf16"] = rate[True] > 1.05 * rate[False]
            print(f"tokens/s fp32 {rate[False]:.0f}  bf16-autocast {rate[True]:.0f}  -> "
                  f"{'bf16' if state['bf16'] else 'fp32'}", flush=True)
        else:
            state["bf16"] = args.bf16 == "on"
    ac = state["bf16"]

    def save_ckpt():
        tmp = ckpt_path + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state,
                    "args": vars(args)}, tmp)
        os.replace(tmp, ckpt_path)
        with open(curve_path, "w") as f:
            json.dump({"args": vars(args), "params": n_params, "bf16": ac,
                       "train_tokens": len(train_ids), "heldout_tokens": len(held_ids),
                       "curve": state["curve"]}, f, indent=1)

    ema = None
    t_resume = time.time() - state["elapsed"]  # wall clock adjusted so elapsed carries over
    last_ckpt = time.time()
    log_every = 10
    bar = tqdm(total=int(budget), initial=int(state["elapsed"]), unit="s", dynamic_ncols=True,
               mininterval=5, file=sys.stdout)
    win_t, win_tok = time.time(), 0
    while True:
        elapsed = time.time() - t_resume
        if elapsed >= budget:
            break
        lr = lr_at(elapsed / budget, args)
        for g in opt.param_groups:
            g["lr"] = lr
        loss = step(ac)
        state["step"] += 1
        state["tokens"] += args.batch * args.ctx
        win_tok += args.batch * args.ctx
        ema = loss if ema is None else 0.95 * ema + 0.05 * loss
        state["elapsed"] = time.time() - t_resume
        bar.n = int(min(state["elapsed"], budget))
        if state["step"] % log_every == 0:
            tps = win_tok / (time.time() - win_t)
            win_t, win_tok = time.time(), 0
            state["curve"].append({"step": state["step"], "tokens": state["tokens"],
                                   "minutes": state["elapsed"] / 60, "lr": lr,
                                   "train_loss": loss, "train_loss_ema": ema})
            bar.set_postfix(step=state["step"], loss=f"{ema:.3f}", lr=f"{lr:.2e}", tok_s=f"{tps:.0f}")
            bar.refresh()
        if time.time() - last_ckpt >= args.ckpt_minutes * 60:
            vl = heldout_loss(model, held_ids, args.ctx, ac)
            state["curve"].append({"step": state["step"], "tokens": state["tokens"],
                                   "minutes": state["elapsed"] / 60, "heldout_loss": vl})
            t_resume += 0  # eval time counts against the budget, keeping the end on time
            save_ckpt()
            tqdm.write(f"step {state['step']}  {state['elapsed'] / 60:.1f} min  "
                       f"train {ema:.3f}  held-out {vl:.3f} (ppl {math.exp(vl):.1f})  checkpoint saved")
            last_ckpt = time.time()
    bar.close()

    vl = heldout_loss(model, held_ids, args.ctx, False)
    state["curve"].append({"step": state["step"], "tokens": state["tokens"],
                           "minutes": state["elapsed"] / 60, "heldout_loss": vl})
    save_ckpt()
    save_hf(model, sp_model, hf_dir, args)
    print(f"done: {state['step']} steps, {state['tokens']:,} tokens "
          f"({state['tokens'] / len(train_ids):.2f} epochs), held-out loss {vl:.4f} "
          f"ppl {math.exp(vl):.2f} (fp32)  -> {hf_dir}", flush=True)


if __name__ == "__main__":
    main()
