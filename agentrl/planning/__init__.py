"""Planning: plan-and-execute episodes (``plan``) and value-guided tree search (``search``)."""

from agentrl.planning.plan import PlanExecute, decomposition_accuracy, parse_plan, plan_text
from agentrl.planning.search import SearchCost, search_episodes

__all__ = [
    "PlanExecute",
    "SearchCost",
    "decomposition_accuracy",
    "parse_plan",
    "plan_text",
    "search_episodes",
]
