"""What keeps a call inside its bounds, whatever the model asks.

- :mod:`.paths`: every path the model names is resolved inside the project
  root, symlinks included, and checked against the denied patterns.
- :mod:`.files`: reads and atomic writes through those resolved paths.
- :mod:`.commands`: the OS sandbox (bubblewrap) commands run in, and their
  process cap.

Nothing here knows about tools or the planner; the layers above call in.
"""
