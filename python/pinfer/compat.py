"""llama-cpp-python parameters that pinfer accepts without implementing them.

The rule: every parameter either works as llama-cpp-python documents it, or a value
other than its do-nothing default is refused with an error naming it. Performance
hints that cannot change an output (mmap, mlock, flash attention, ...) are accepted
with a notice instead, as llama-cpp-python code passes them routinely.

Each table maps a parameter to (its do-nothing default, action, reason). It is the one
list of these parameters: ``Llama`` checks its ``**kwargs`` against it and the tests
enumerate it.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, Tuple

REFUSE = "refuse"  # another value raises NotImplementedError
NOTICE = "notice"  # another value prints a notice: it has no effect on the output
WITH = "with"      # only read together with another parameter that is refused (as upstream)

Table = Dict[str, Tuple[Any, str, str]]

#: Llama(...) constructor.
INIT: Table = {
    "main_gpu": (0, NOTICE, "one device only (device=, n_gpu_layers=)"),
    "tensor_split": (None, NOTICE, "one device only (device=, n_gpu_layers=)"),
    "split_mode": (None, NOTICE, "one device only (device=, n_gpu_layers=)"),
    "rpc_servers": (None, REFUSE, "no RPC backend"),
    "vocab_only": (False, REFUSE, "a context is always created"),
    "use_mmap": (True, NOTICE, "weights are always memory-mapped"),
    "use_mlock": (False, NOTICE, "pages are not locked"),
    "numa": (False, NOTICE, "no NUMA placement"),
    "offload_kqv": (True, NOTICE, "the device plan decides (device=, n_gpu_layers=)"),
    "flash_attn": (False, NOTICE, "attention has one implementation"),
    "op_offload": (None, NOTICE, "the device plan decides"),
    "swa_full": (None, NOTICE, "no sliding-window cache"),
    "no_perf": (False, NOTICE, "timings are always collected"),
    "n_ubatch": (512, NOTICE, "n_batch is the only batch size"),
    "n_threads_batch": (None, NOTICE, "n_threads serves prompts too"),
    "kv_overrides": (None, REFUSE, "GGUF metadata overrides are not implemented"),
    "rope_scaling_type": (None, REFUSE, "RoPE scaling is not implemented"),
    "rope_freq_base": (0.0, REFUSE, "RoPE frequency overrides are not implemented"),
    "rope_freq_scale": (0.0, REFUSE, "RoPE frequency overrides are not implemented"),
    "yarn_ext_factor": (-1.0, REFUSE, "YaRN is not implemented"),
    "yarn_attn_factor": (1.0, REFUSE, "YaRN is not implemented"),
    "yarn_beta_fast": (32.0, REFUSE, "YaRN is not implemented"),
    "yarn_beta_slow": (1.0, REFUSE, "YaRN is not implemented"),
    "yarn_orig_ctx": (0, REFUSE, "YaRN is not implemented"),
    "lora_base": (None, WITH, "lora_path"),
    "lora_path": (None, REFUSE, "LoRA adapters are not implemented"),
    "lora_scale": (1.0, WITH, "lora_path"),
    "draft_model": (None, REFUSE, "speculative decoding is not implemented"),
    "tokenizer": (None, REFUSE, "the model's own tokenizer is always used"),
    "spm_infill": (False, REFUSE, "fill-in-the-middle is not implemented"),
}

#: Sampling parameters shared by create_completion, create_chat_completion and generate.
SAMPLING: Table = {
    "tfs_z": (1.0, REFUSE, "tail-free sampling is not implemented (llama.cpp removed it too)"),
}

#: create_completion only.
COMPLETION: Table = {
    "suffix": (None, REFUSE, "fill-in-the-middle is not implemented"),
}

#: create_chat_completion only.
CHAT: Table = {
    "functions": (None, REFUSE, "OpenAI's deprecated functions API: use tools= and tool_choice="),
    "function_call": (None, REFUSE, "OpenAI's deprecated functions API: use tools= and tool_choice="),
}

#: generate only.
GENERATE: Table = {
    "penalize_nl": (True, REFUSE, "the newline token is always penalized like any other"),
}


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    try:
        return bool(a == b)
    except Exception:
        return False


def check(where: str, kwargs: Dict[str, Any], *tables: Table) -> None:
    """Refuse unknown names (TypeError) and unimplemented values (NotImplementedError);
    print a notice for hints that have no effect."""
    for name, value in kwargs.items():
        entry = next((t[name] for t in tables if name in t), None)
        if entry is None:
            raise TypeError(f"{where}() got an unexpected keyword argument '{name}'")
        default, action, why = entry
        if _same(value, default) or action == WITH:
            continue
        if action == REFUSE:
            raise NotImplementedError(f"{where}(): {name}={value!r} is not supported: {why}")
        print(f"pinfer: notice: {name}={value!r} has no effect: {why}", file=sys.stderr)
