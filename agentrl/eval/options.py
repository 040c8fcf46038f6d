"""Help texts of ``agentrl eval``'s decoding options (shared by the CLI and its docs)."""

SEARCH_HELP = (
    "Tree search: at each turn try K actions (the greedy one and K-1 sampled), play "
    "each in a restored copy of the env, keep the best (1 = plain "
    "greedy; a model only)."
)
VALUE_HELP = (
    "Tree search: how a branch still running after its lookahead is scored: layers (the "
    "reward layers earned so far) or critic (a PPO run directory's critic.pt)."
)
DEPTH_HELP = (
    "Tree search: turns each candidate is played before it is scored (its reward if "
    "it ended, else the reward layers earned so far)."
)
CONSTRAINED_HELP = (
    "Grammar-constrained tool calls: tool_calls (once a turn writes <tool_call>, only a "
    "well-formed call of an offered tool can follow) or off (default: the run's "
    "rollout.constrained, else off)."
)
