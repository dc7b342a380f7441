"""Terminal handoff: find terminal-started sessions, tell who owns one, mirror it read-only.

The hub (``bridge/sessions.py``) runs the single-writer state machine; the adapters' handoff
classmethods delegate here. Shared pieces:

- ``tail``: a sans-I/O line splitter and a file tail that survives partial last lines,
  truncation and rotation, plus a ``watchfiles``-driven change signal.
- ``mirror``: an async iterator that follows one transcript and turns lines into blocks
  through a per-agent sans-I/O parser.
- ``procscan``: ``/proc`` (command line, cwd, open files, start time, file locks), never
  counting the daemon's own children (``bridge.process.OWN_PIDS``) as terminal owners.
- ``sqlite_ro``: read-only SQLite opening for the agents that keep sessions in a database.
- ``files``: bounded head/tail reads and a stat-keyed cache, so listing stays fast on
  transcripts of many megabytes.

Per agent: ``claude``, ``codex`` (and others as their adapters land). See
docs/session-handoff.md for the design and the per-adapter matrix.
"""
