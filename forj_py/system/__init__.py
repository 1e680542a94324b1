"""The operating system as tools use it: child processes, walks, git, watching.

- :mod:`.process`: a command in its own process group, its output streamed
  with back-pressure, the whole group ended on timeout or cancel.
- :mod:`.walk`: a project walk that honours ignore files and the denied
  patterns.
- :mod:`.git`: git on the project's repository, running none of the
  programs the repository's own configuration names; :mod:`.hooks` and
  :mod:`.hookgate`: its hooks skipped, or run inside the command sandbox.
- :mod:`.inotify`: the project tree watched for changes (Linux).
"""
