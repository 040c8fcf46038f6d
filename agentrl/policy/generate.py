"""Batched generation with Hugging Face models: one call per turn for all live episodes.

Prompts of different lengths are left-padded into one batch; ``model.generate`` reuses the KV
cache across decoding steps. When the prompts share a long first part (the system turn with the
tool schemas: several hundred tokens, the same in every episode of a task), that part is encoded
once and its KV cache repeated over the batch; only the rest of each prompt is prefilled. Each
returned sample carries the exact sampled ids (stop token included) and their log-probabilities
under the sampling temperature.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentrl.policy.logprobs import token_logprobs
from agentrl.policy.prefix import MIN_SHARED_PREFIX, common_prefix_length, prefix_cache


@dataclass
class Sample:
    """One generated turn."""

    ids: list[int]  # sampled ids, up to and including the stop token when one was produced
    logprobs: list[float]  # log-prob of each id at sampling time (temperature applied)
    stopped: bool  # True if a stop token ended the turn (False: max_new_tokens ran out)


class HFGenerator:
    """Generate turns for many episodes at once with a causal LM.

    ``share_prefix`` (default on) encodes the prompts' common prefix once per call.
    """

    def __init__(
        self, model, tokenizer, stop_ids: list[int], pad_id: int, share_prefix: bool = True
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.stop_ids = list(stop_ids)
        self.pad_id = pad_id
        self.share_prefix = share_prefix

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        greedy: bool = False,
    ) -> list[Sample]:
        if not prompts:
            return []
        shared = common_prefix_length(prompts) if self.share_prefix and len(prompts) > 1 else 0
        if shared < MIN_SHARED_PREFIX:
            shared = 0
        width = shared + max(len(p) - shared for p in prompts)
        # Row i: [shared prefix | left padding | rest of prompt i]; the padding sits in the middle
        # and is masked, so positions (cumsum of the mask) run on unbroken across it.
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)  # (B, L)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)  # (B, L)
        for i, p in enumerate(prompts):
            input_ids[i, :shared] = torch.tensor(p[:shared], dtype=torch.long)
            attention[i, :shared] = 1
            input_ids[i, width - (len(p) - shared) :] = torch.tensor(p[shared:], dtype=torch.long)
            attention[i, width - (len(p) - shared) :] = 1
        was_training = self.model.training
        self.model.eval()
        options = {} if greedy else {"temperature": temperature, "top_p": top_p, "top_k": 0}
        if shared:
            options.update(
                prefix_cache(self.model, input_ids[:1, :shared].to(self.device), len(prompts))
            )
        out = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention.to(self.device),
            do_sample=not greedy,
            max_new_tokens=max_new_tokens,
            eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id,
            return_dict_in_generate=True,
            output_logits=True,
            **options,
        )
        if was_training:
            self.model.train()
        new_ids = out.sequences[:, width:].cpu()  # (B, N)
        logits = torch.stack(out.logits, dim=1).cpu()  # (B, N, V)
        temp = 1.0 if greedy else temperature
        lps = token_logprobs(logits, new_ids, temp)  # (B, N)
        samples = []
        stop = set(self.stop_ids)
        for i in range(len(prompts)):
            ids = new_ids[i].tolist()
            end = next((j for j, t in enumerate(ids) if t in stop), None)
            n = len(ids) if end is None else end + 1
            samples.append(Sample(ids[:n], lps[i, :n].tolist(), stopped=end is not None))
        return samples
