"""What keeps a call inside its bounds, whatever the model asks.

- :mod:`.paths`: every path the model names is resolved inside the project
  root, symlinks included, and checked against the denied patterns.
- :mod:`.files`: reads and atomic writes through those resolved paths.
- :mod:`.commands`: the OS sandbox (bubblewrap) commands run in, and their
  process cap; :mod:`.bwrap_probe`: whether bubblewrap works here.
- :mod:`.permissions`: permission rules and what they match;
  :mod:`.network`: where ``curl`` may connect.
- :mod:`.secretenv` and :mod:`.cmdline`: secrets in the environment and in
  command lines, removed or redacted; :mod:`.programs`: where the worker
  finds the programs it runs itself.

Nothing here knows about tools or the planner; the layers above call in.
"""
