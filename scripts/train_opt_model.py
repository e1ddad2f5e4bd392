#!/usr/bin/env python3
"""Train a tiny OPT on Jane Austen (CPU, a few minutes) and measure its FFN activation sparsity.

No model hub is reachable here, so the OPT whose sparsity BENCHMARKS.md reports is
made by this script: transformers' own OPTForCausalLM (pre-LN, ReLU, tied output)
trained from scratch; nothing of it is committed.

Steps (all under --out):
  1. tokenizer: GPT-2 style byte-level BPE trained with the `tokenizers` library on
     the six novels (pinfer.datasets.austen_books()), written as OPT ships it:
     vocab.json + merges.txt, <s> <pad> </s> <unk> first, </s> as BOS.
  2. model: OPTConfig(--d, --layers, --heads, --ff), AdamW, linear warm-up then
     cosine decay over the wall-clock budget (--minutes), random --ctx windows of
     the text after the held-out tail (the last --heldout characters of Persuasion).
  3. <out>/hf: the HF directory; <out>/opt.gguf: pinfer convert --type f32.
  4. sparsity: pinfer's exact sparse mode over --eval-tokens held-out tokens
     (windows of --ctx): per layer the fraction of FFN neurons with fc1 x + b <= 0,
     printed as a markdown table and written to <out>/sparsity.json.

Example:
  python scripts/train_opt_model.py --out ~/.cache/pinfer-bench/opt-austen --minutes 6
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def train_tokenizer(text: str, out: str, vocab: int) -> None:
    from tokenizers import ByteLevelBPETokenizer

    tk = ByteLevelBPETokenizer(add_prefix_space=False)
    tk.train_from_iterator(text.split("\n"), vocab_size=vocab, special_tokens=SPECIALS, show_progress=False)
    tk.save_model(out)  # vocab.json + merges.txt
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "bos_token": "</s>", "eos_token": "</s>",
                   "unk_token": "</s>", "pad_token": "<pad>", "add_bos_token": True}, f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.expanduser("~/.cache/pinfer-bench/opt-austen"))
    ap.add_argument("--minutes", type=float, default=6.0, help="wall-clock training budget")
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=1024)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--heldout", type=int, default=60000, help="characters of held-out text (end of Persuasion)")
    ap.add_argument("--eval-tokens", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import numpy as np
    import torch
    import transformers

    from pinfer import _core, datasets
    from pinfer import convert as cv

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    hf_dir = os.path.join(args.out, "hf")
    os.makedirs(hf_dir, exist_ok=True)
    books = datasets.austen_books()
    last = "Persuasion"
    heldout = books[last][-args.heldout:]
    train_text = "\n\n".join(v if k != last else v[:-args.heldout] for k, v in books.items())

    train_tokenizer(train_text, hf_dir, args.vocab)
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    ids = torch.tensor(tok(train_text, add_special_tokens=False)["input_ids"], dtype=torch.long)
    print(f"train tokens: {len(ids)}", file=sys.stderr)

    cfg = transformers.OPTConfig(vocab_size=len(tok), hidden_size=args.d, num_hidden_layers=args.layers,
                                 ffn_dim=args.ff, num_attention_heads=args.heads, max_position_embeddings=args.ctx,
                                 word_embed_proj_dim=args.d, do_layer_norm_before=True, dropout=0.0,
                                 attention_dropout=0.0, pad_token_id=1, bos_token_id=2, eos_token_id=2)
    model = transformers.OPTForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    budget = args.minutes * 60
    t0, step = time.time(), 0
    bos = torch.full((args.batch, 1), 2, dtype=torch.long)
    model.train()
    while (el := time.time() - t0) < budget:
        frac = el / budget
        lr = args.lr * min(1.0, frac / 0.05) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(ids) - args.ctx, (args.batch,))
        x = torch.cat([bos, torch.stack([ids[s:s + args.ctx - 1] for s in starts])], dim=1)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            print(f"step {step} {el:.0f}s lr {lr:.2e} loss {loss.item():.3f}", file=sys.stderr)
        step += 1
    model.eval()
    model.save_pretrained(hf_dir)
    gguf = cv.convert(hf_dir, os.path.join(args.out, "opt.gguf"), type="f32", progress=False)

    # sparsity on the held-out text, with pinfer's exact mode (the set it skips)
    m = _core.Model(gguf)
    ev = list(m.tokenize(heldout, False, False))[:args.eval_tokens]
    ctx = _core.Context(m, args.ctx, args.ctx, args.threads, "f32", "exact", True)
    nll, n = 0.0, 0
    for s in range(0, len(ev), args.ctx - 1):
        w = [2] + ev[s:s + args.ctx - 1]
        ctx.seq_rm(0, 0, -1)
        ctx.decode(w, all_logits=True)
        lg = np.asarray(ctx.logits_all(), np.float64)[:-1]
        lse = np.log(np.exp(lg - lg.max(1, keepdims=True)).sum(1)) + lg.max(1)
        nll += float((lse - lg[np.arange(len(w) - 1), w[1:]]).sum())
        n += len(w) - 1
    layers = ctx.sparse_stats()["layers"]
    rep = {"checkpoint": hf_dir, "steps": step, "minutes": args.minutes, "final_train_loss": float(loss.item()),
           "heldout_tokens": n, "heldout_ppl": math.exp(nll / n),
           "config": {k: getattr(cfg, k) for k in ("vocab_size", "hidden_size", "num_hidden_layers", "ffn_dim",
                                                    "num_attention_heads", "max_position_embeddings")},
           "sparsity": [1.0 - s["active_frac"] for s in layers]}
    with open(os.path.join(args.out, "sparsity.json"), "w") as f:
        json.dump(rep, f, indent=1)
    print(f"{step} steps, held-out perplexity {rep['heldout_ppl']:.2f} over {n} tokens")
    print("| layer | FFN sparsity (fc1 x + b <= 0) |\n|---|---|")
    for il, sp in enumerate(rep["sparsity"]):
        print(f"| {il} | {100 * sp:.1f}% |")
    print(f"| mean | {100 * float(np.mean(rep['sparsity'])):.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
