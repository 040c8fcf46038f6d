"""agentrl: train tool-using LLM agents with reinforcement learning (GRPO)."""

import logging as _logging

__version__ = "0.1.0"

# The quant extra's libraries (peft imports them whenever they are installed) log at import on
# every CPU machine: torchao each CUDA kernel it cannot load and a torch deprecation notice,
# bitsandbytes a kernel it could not fetch from the hub (it falls back to its own). None of it
# concerns agentrl; real errors still show.
for _name in ("torchao", "torch.utils._pytree", "bitsandbytes.backends.cpu.ops"):
    _logging.getLogger(_name).setLevel(_logging.ERROR)
