"""Hierarchical episode memory for long episodes: hot / warm / cold turns.

- hot: the last ``hot_turns`` turns, verbatim in the prompt;
- warm: the ``warm_turns`` before them, one line each (``records``: task type, tool-call
  result with its key values, state);
- cold: older turns, recalled by MinHash LSH against the current state (``lsh``).

``EpisodeMemory.view`` renders the next turn's prompt within ``rollout.memory.budget_tokens``;
the rollout (``agentrl.rollout.run_episodes(memory=...)``) stores each rewritten context as a
token-exact ``Segment``; ``agentrl.algos.segments`` trains all segments of an episode with
the episode's advantage.
"""

from agentrl.memory.episode import EpisodeMemory
from agentrl.memory.lsh import ColdStore
from agentrl.memory.records import WarmRecord, compress_turn
from agentrl.memory.render import render_note

__all__ = ["ColdStore", "EpisodeMemory", "WarmRecord", "compress_turn", "render_note"]
