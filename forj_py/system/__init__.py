"""The operating system as tools use it: child processes and directory walks.

- :mod:`.process`: a command in its own process group, its output streamed
  with back-pressure, the whole group ended on timeout or cancel.
- :mod:`.walk`: a project walk that honours ignore files and the denied
  patterns.
"""
