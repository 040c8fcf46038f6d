"""Build a tiny tool-using model locally: tokenizer, Qwen2 model, generic tool-use pretraining.

Nothing is downloaded (DESIGN contract 7). ``build_tiny_model()`` trains a byte-level BPE
tokenizer (words, numbers and spaces are separate pieces), makes a few-million parameter
``Qwen2ForCausalLM`` whose initial weights carry hand-wired copy heads
(``agentrl.tiny.wiring``), and pretrains it in three phases: random-token repeats (the copy
heads), "repeat after me" drills, then synthetic tool-use conversations over made-up tools
(``agentrl.tiny.corpus``), so it behaves like a (very) small instruct model that calls tools in
the Qwen2.5 format. The result is cached on disk; ``TINY_MODEL_ID`` names it wherever a model
id is accepted.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from transformers.utils.chat_template_utils import render_jinja_template

from agentrl.chat.render import encode_conversation, tokenize
from agentrl.chat.template import (
    ENDOFTEXT,
    IM_END,
    IM_START,
    QWEN25_TOOL_TEMPLATE,
    SPECIAL_TOKENS,
    TAG_TOKENS,
)
from agentrl.tiny.corpus import COMMON_WORDS, drill_text, make_corpus, make_drills
from agentrl.tiny.lock import MARKER as MARKER  # re-exported: a build's marker file
from agentrl.tiny.lock import build_once, cache_root
from agentrl.tiny.lock import is_complete as is_complete
from agentrl.tiny.vocab import vocabulary_texts
from agentrl.tiny.wiring import wire_copy_heads

TINY_MODEL_ID = "agentrl/tiny"
TINY_VERSION = "tiny-v4"
VOCAB_SIZE = 2048
#: Tool-chat pretraining steps of the default build (whole build: 371 s measured on 2 lightly
#: loaded CPU cores, induction rows and copy drills included).
DEFAULT_STEPS = 250
# Pre-tokenizer split: words, numbers, punctuation runs and spaces are separate pieces, so a
# word is the same token wherever it appears ("Paris" in a request, in JSON arguments and in an
# answer), and copying it is an exact token copy for the induction head.
SPLIT_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|\p{L}+|\p{N}+|[^\s\p{L}\p{N}]+|\s+"
#: Pretraining hyper-parameters (``steps`` batches of ``batch_size`` fresh conversations).
PRETRAIN: dict[str, Any] = {
    "batch_size": 16,
    "lr": 2e-3,
    "induction_steps": 100,
    "induction_batch": 32,
    "drill_steps": 300,
    "drill_batch": 32,
}
MODEL_CONFIG: dict[str, Any] = dict(
    hidden_size=192,
    intermediate_size=768,
    num_hidden_layers=3,
    num_attention_heads=3,
    num_key_value_heads=3,
    max_position_embeddings=2048,
    rope_theta=1_000_000.0,  # many slow RoPE pairs: the wired induction head matches on them
    tie_word_embeddings=True,
)


def default_tiny_dir() -> Path:
    """``$AGENTRL_CACHE/<TINY_VERSION>`` (default cache: ``~/.cache/agentrl``)."""
    return cache_root() / TINY_VERSION


def corpus_texts(n: int, seed: int) -> list[str]:
    """Rendered synthetic conversations (plus common words) to train the BPE on."""
    texts = [COMMON_WORDS, *vocabulary_texts()]
    for msgs, tools in make_corpus(n, seed=seed):
        rendered, _ = render_jinja_template(
            conversations=[msgs], tools=tools, chat_template=QWEN25_TOOL_TEMPLATE
        )
        texts.append(rendered[0])
    return texts


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE) -> PreTrainedTokenizerFast:
    """A byte-level BPE with Qwen's special and tag tokens and the tool chat template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens(list(TAG_TOKENS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IM_START],
        model_max_length=MODEL_CONFIG["max_position_embeddings"],
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = QWEN25_TOOL_TEMPLATE
    return fast


def make_model(
    tokenizer: PreTrainedTokenizerFast, seed: int = 0, copy_heads: bool = True, **overrides: Any
) -> Qwen2ForCausalLM:
    """A freshly initialised fp32 ``Qwen2ForCausalLM`` for ``tokenizer`` (``MODEL_CONFIG``)."""
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
        **{**MODEL_CONFIG, **overrides},
    )
    model = Qwen2ForCausalLM(config).float()
    if copy_heads:  # hand-wired copy heads (agentrl.tiny.wiring); off for odd test shapes
        model = wire_copy_heads(model, seed=seed)
    model.generation_config.eos_token_id = [
        tokenizer.convert_tokens_to_ids(IM_END),
        tokenizer.convert_tokens_to_ids(ENDOFTEXT),
    ]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def _drill_row(tokenizer: PreTrainedTokenizerFast, messages: list) -> tuple[list[int], list[int]]:
    """(ids, loss mask) of one copy drill; the answer and its ``<|im_end|>`` are trained on."""
    prompt, answer = drill_text(messages)
    p, a = tokenize(tokenizer, prompt), tokenize(tokenizer, answer)
    return p + a, [0] * len(p) + [1] * len(a)


def induction_rows(
    tokenizer: PreTrainedTokenizerFast, n: int, seed: int
) -> list[tuple[list[int], list[int]]]:
    """``n`` random-token sequences, each repeated once; the loss is on the repeat only.

    The repeat is predictable only by copying, so these rows train the hand-wired copy heads
    (``agentrl.tiny.wiring``) to full strength and, mixed into the later phases, keep them from
    being trained away (measured: without them the repeat's loss went back to ~6.9 nats).
    Span and gap lengths vary, so no fixed-offset shortcut solves them.
    """
    rng = random.Random(seed)
    special = set(tokenizer.all_special_ids) | set(tokenizer.convert_tokens_to_ids(TAG_TOKENS))
    pool = [i for i in range(len(tokenizer)) if i not in special]
    rows = []
    for _ in range(n):
        span = [rng.choice(pool) for _ in range(rng.randint(8, 24))]
        gap = [rng.choice(pool) for _ in range(rng.randint(0, 8))]
        rows.append((span + gap + span, [0] * (len(span) + len(gap)) + [1] * len(span)))
    return rows


def build_tiny_model(
    out_dir: str | Path | None = None,
    *,
    seed: int = 0,
    steps: int | None = None,
    drill_steps: int | None = None,
    induction_steps: int | None = None,
    force: bool = False,
    progress: bool = True,
) -> Path:
    """Build (or reuse) the tiny tokenizer + pretrained model in ``out_dir``; return the path.

    The build is written to a temp directory next to ``out_dir``, renamed into place, and the
    ``BUILD_COMPLETE`` marker is written last, so an interrupted build is never reused. It runs
    under an exclusive lock (``agentrl.tiny.lock``): a second process building the same
    directory waits, then reuses the finished build; temp directories of dead builds go.
    """
    out = Path(out_dir) if out_dir is not None else default_tiny_dir()

    def write(tmp: Path) -> str:
        t0 = time.perf_counter()
        model, tokenizer, stats = pretrain(seed, steps, drill_steps, induction_steps, progress)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        info = f"steps={stats['steps']} final_loss={stats['final_loss']:.4f} "
        return info + f"tokens={stats['tokens']} seconds={time.perf_counter() - t0:.1f}\n"

    return build_once(out, write, force)


def pretrain(
    seed: int,
    steps: int | None,
    drill_steps: int | None,
    induction_steps: int | None,
    progress: bool,
) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast, dict[str, Any]]:
    """Train the tokenizer, wire the model, pretrain it in three phases; (model, tok, stats)."""
    from agentrl.sft import train_rows  # sft imports chat only; kept local to keep imports light

    steps = DEFAULT_STEPS if steps is None else steps
    tokenizer = train_tokenizer(corpus_texts(2000, seed=seed + 1))
    model = make_model(tokenizer, seed=seed)
    if induction_steps is None:
        induction_steps = PRETRAIN["induction_steps"]
    n_induction = max(induction_steps, 1) * PRETRAIN["induction_batch"]
    train_rows(model, tokenizer, induction_rows(tokenizer, n_induction, seed=seed + 4),
               lr=PRETRAIN["lr"], batch_size=PRETRAIN["induction_batch"], seed=seed,
               progress=progress, desc="pretrain tiny: induction", warmup_steps=30,
               schedule="constant", group_by_length=False)  # fmt: skip
    drill_steps = PRETRAIN["drill_steps"] if drill_steps is None else drill_steps
    drill_rows = [_drill_row(tokenizer, m) for m in make_drills(
        max(drill_steps, 1) * PRETRAIN["drill_batch"], seed=seed + 2)]  # fmt: skip
    # induction rows stay in every later phase: without them the copy heads are trained away
    drill_rows += induction_rows(tokenizer, len(drill_rows) // 2, seed=seed + 5)
    train_rows(model, tokenizer, drill_rows, lr=PRETRAIN["lr"], batch_size=PRETRAIN["drill_batch"],
               seed=seed, progress=progress, desc="pretrain tiny: copy drills", warmup_steps=50,
               schedule="constant", group_by_length=False)  # fmt: skip
    bs = PRETRAIN["batch_size"]
    corpus = make_corpus(max(steps * bs, bs), seed=seed)
    rows = [encode_conversation(tokenizer, m, t) for m, t in corpus]
    rows += [_drill_row(tokenizer, m) for m in make_drills(len(rows) // 3, seed=seed + 3)]
    rows += induction_rows(tokenizer, len(rows) // 4, seed=seed + 6)
    stats = train_rows(
        model, tokenizer, [(i[:768], k[:768]) for i, k in rows], lr=PRETRAIN["lr"], batch_size=bs,
        seed=seed, progress=progress, desc="pretrain tiny: tool use",
        warmup_steps=min(30, steps // 10),
    )  # fmt: skip
    model.eval()
    return model, tokenizer, stats
