"""llama.cpp as a rollout backend? Decode the same prompts with agentrl's engine and with
llama.cpp (``llama-cpp-python``, batched through its C API), in one run.

Run from the repository root, with ``llama-cpp-python`` installed (it builds from source with
cmake and gcc; ``pip install llama-cpp-python``)::

    python bench/llamacpp_decode.py --model agentrl/smollm2-135m --rows 16 64 --json llama.json

For RL a backend must decode the *current* policy, so llama.cpp needs the policy exported to
GGUF after every update: the export is timed (``gguf`` writer, f32 and bf16 weights) and
counted in its figure. The shipped Q4_1 file is decoded too, for reference only (a 4-bit
policy is not the one the trainer updates). Every row decodes exactly ``--new`` tokens
greedily (no stop token), after a prefill of its own ~300-token weather prompt; the figure is
policy tokens per second over prefill and decode. Not a test.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from turn_cost import prompts

from agentrl.engine.decoder import Engine
from agentrl.engine.shadow import decode_dtype
from agentrl.policy.loading import load_policy
from agentrl.policy.packaged import packaged_file


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="agentrl/smollm2-135m")
    p.add_argument("--rows", type=int, nargs="+", default=[16, 64])
    p.add_argument("--new", type=int, default=64, help="tokens decoded per row")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--shipped", action="store_true", help="also decode the shipped Q4_1 file")
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(argv)


def export_gguf(model, tok, path: Path, dtype: str) -> float:
    """Write the policy as a llama-architecture GGUF; returns seconds."""
    import gguf

    t0 = time.perf_counter()
    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_rope_freq_base(float(getattr(cfg, "rope_theta", None) or 10000.0))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    ftype = gguf.LlamaFileType
    w.add_file_type(ftype.ALL_F32 if dtype == "f32" else ftype.MOSTLY_BF16)
    add_tokenizer(w, tok)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    state = model.state_dict()
    if "lm_head.weight" not in state or cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    for name, t in state.items():
        t = t.detach().float()
        if name.endswith("q_proj.weight"):
            t = permute_rope(t, heads)
        elif name.endswith("k_proj.weight"):
            t = permute_rope(t, kv_heads)
        gname = names.get_name(name.removesuffix(".weight"), try_suffixes=()) + ".weight"
        arr = t.numpy()
        if dtype == "bf16" and arr.ndim == 2:
            w.add_tensor(gname, bf16_bits(t), raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(gname, arr.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return time.perf_counter() - t0


def permute_rope(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """HF's rotate-half q/k layout -> GGUF's interleaved layout (what llama.cpp expects)."""
    out, dim = w.shape
    return w.reshape(n_head, 2, out // n_head // 2, dim).swapaxes(1, 2).reshape(out, dim)


def bf16_bits(t: torch.Tensor) -> np.ndarray:
    return (
        t.to(torch.bfloat16)
        .view(torch.int16)
        .numpy()
        .view(np.uint16)
        .view(np.uint8)
        .reshape(t.shape[0], -1)
    )


def add_tokenizer(w, tok) -> None:
    """GPT-2 style BPE vocabulary and merges from the HF tokenizer."""
    import json as _json

    spec = _json.loads(tok.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    tokens = [None] * len(vocab)
    for piece, i in vocab.items():
        tokens[i] = piece
    added = {a["id"]: a["content"] for a in spec.get("added_tokens", [])}
    for i, c in added.items():
        if i < len(tokens):
            tokens[i] = c
    types = [3 if i in added else 1 for i in range(len(tokens))]  # 3 = control, 1 = normal
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tok.bos_token_id if tok.bos_token_id is not None else 1)
    w.add_eos_token_id(tok.eos_token_id)


def llama_decode_run(path: Path, starts: list[list[int]], new: int, threads: int) -> dict:
    """Prefill every row, then ``new`` greedy steps of all rows in one batch each."""
    import llama_cpp as L

    L.llama_backend_init()
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(str(path).encode(), mp)
    rows = len(starts)
    cp = L.llama_context_default_params()
    cp.n_ctx = sum(len(s) + new for s in starts) + 64
    cp.n_batch = 2048
    cp.n_ubatch = 512
    cp.n_seq_max = rows
    cp.n_threads = cp.n_threads_batch = threads
    ctx = L.llama_init_from_model(model, cp)
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    batch = L.llama_batch_init(max(2048, rows), 0, 1)

    def fill(items):  # items: (token, pos, seq, want_logits)
        batch.n_tokens = len(items)
        for i, (t, p, s, lg) in enumerate(items):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, p, 1
            batch.seq_id[i][0], batch.logits[i] = s, int(lg)
        rc = L.llama_decode(ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def row_argmax(i):
        ptr = L.llama_get_logits_ith(ctx, i)
        arr = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), (n_vocab,))
        return int(arr.argmax())

    t0 = time.perf_counter()
    last = []
    for s, p in enumerate(starts):  # prefill in chunks of the batch size
        for c in range(0, len(p), 2048):
            chunk = p[c : c + 2048]
            fill([(t, c + j, s, c + j == len(p) - 1) for j, t in enumerate(chunk)])
        last.append(row_argmax(len(chunk) - 1))
    t_prefill = time.perf_counter() - t0
    outs = [[t] for t in last]
    for step in range(1, new):
        fill([(outs[s][-1], len(starts[s]) + step - 1, s, True) for s in range(rows)])
        for s in range(rows):
            outs[s].append(row_argmax(s))
    total = time.perf_counter() - t0
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return {"prefill_s": t_prefill, "total_s": total, "tokens_per_s": rows * new / total,
            "first_ids": outs[0][:16]}  # fmt: skip


def engine_run(model, tok, starts, new: int) -> dict:
    dtype = decode_dtype("auto", model, "cpu")
    engine = Engine(model, tok, [-1], tok.pad_token_id, dtype=dtype)  # no stop: --new each
    engine.generate(starts[:2], max_new_tokens=4, greedy=True)  # warm-up (the packed copy)
    t0 = time.perf_counter()
    out = engine.generate(starts, max_new_tokens=new, greedy=True)
    total = time.perf_counter() - t0
    return {"dtype": str(dtype), "total_s": total, "tokens_per_s": len(starts) * new / total,
            "first_ids": out[0].ids[:16]}  # fmt: skip


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tok = load_policy(args.model)
    model.eval()
    result: dict = {"model": args.model, "new": args.new, "runs": []}
    tmp = Path(tempfile.mkdtemp())
    files = {}
    for dtype in ("f32", "bf16"):
        files[dtype] = tmp / f"policy-{dtype}.gguf"
        secs = export_gguf(model, tok, files[dtype], dtype)
        result[f"export_{dtype}_s"] = secs
        print(f"export {dtype}: {secs:.2f} s ({files[dtype].stat().st_size / 2**20:.0f} MiB)")
    if args.shipped and args.model == "agentrl/smollm2-135m":
        files["q4_1 (shipped)"] = packaged_file(args.model)
    for rows in args.rows:
        starts = prompts(tok, rows)
        with torch.inference_mode():
            eng = engine_run(model, tok, starts, args.new)
        print(f"rows {rows}: agentrl engine ({eng['dtype']}) {eng['tokens_per_s']:.1f} tok/s "
              f"({eng['total_s']:.2f} s)")  # fmt: skip
        run = {"rows": rows, "agentrl": eng}
        for name, path in files.items():
            r = llama_decode_run(path, starts, args.new, args.threads)
            export = result.get(f"export_{name}_s", 0.0)
            r["tokens_per_s_with_export"] = rows * args.new / (r["total_s"] + export)
            r["same_greedy_start"] = r["first_ids"][:8] == eng["first_ids"][:8]
            run[f"llama.cpp {name}"] = r
            print(f"rows {rows}: llama.cpp {name} {r['tokens_per_s']:.1f} tok/s "
                  f"({r['total_s']:.2f} s, prefill {r['prefill_s']:.2f} s; "
                  f"with export {r['tokens_per_s_with_export']:.1f}); "
                  f"first 8 greedy ids match the engine: {r['same_greedy_start']}")  # fmt: skip
        result["runs"].append(run)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
