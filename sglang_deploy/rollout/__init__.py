"""A fleet's restarts taking turns: which node (or serving group) restarts next, and how the
hosts of one operation meet to decide it.

- order.py: the pure planning (waves, the last node of a model in rotation, the rollout's stop
  rule); sizes.py: counts and percentages of the run's nodes.
- rendezvous.py: every host arrives, one plans, the rest wait (below pyinfra's --parallel:
  turns instead), for waves, fan-out and a canary's bake.
- waves.py: a restart operation's waves as they run, for single nodes and serving groups
  (named by their rank 0); bake.py: the canary wave's bake.
"""
