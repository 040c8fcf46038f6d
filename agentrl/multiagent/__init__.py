"""Multi-agent RL: teams of agents with their own tools and views (``team.py``), the
``meeting_duo`` task (``meeting_duo.py``) and the team rollout (``rollout.py``), which gives
each agent a token-exact ``Trajectory`` of its own. ``agentrl.multiagent.envs`` registers the
task's env id (``task.imports: [agentrl.multiagent.envs]``)."""
