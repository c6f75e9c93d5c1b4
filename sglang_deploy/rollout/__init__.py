"""A fleet's restarts taking turns: which node (or serving group) restarts next, and how the
hosts of one operation meet to decide it.

- order.py: the pure planning (waves, the last node of a model in rotation, the rollout's stop
  rule); sizes.py: counts and percentages of the run's nodes.
"""
