"""Planning: value-guided tree search over an episode's turns (``search``)."""

from agentrl.planning.search import SearchCost, search_episodes

__all__ = ["SearchCost", "search_episodes"]
