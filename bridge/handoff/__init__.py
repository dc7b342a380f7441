"""Terminal handoff: find terminal-started sessions, tell who owns one, mirror it read-only.

The hub (``bridge/hub/``) runs the single-writer state machine; the adapters' handoff
classmethods delegate here. Shared pieces:

- ``tail``: a sans-I/O line splitter and a file tail that survives partial last lines,
  truncation and rotation, plus a ``watchfiles``-driven change signal.
- ``mirror``: async iterators that follow one transcript (``TranscriptMirror``) or poll one
  database (``PollingMirror``) and turn what changed into blocks through a per-agent sans-I/O
  parser; both can read to the end once more before they stop (``close_at_eof``).
- ``procscan``: ``/proc`` (command line, cwd, open files, start time, file locks), never
  counting the daemon's own children (``bridge.process.OWN_PIDS``) as terminal owners.
- ``sqlite_ro``: read-only SQLite opening for the agents that keep sessions in a database.
- ``files``: bounded head/tail reads and a stat-keyed cache, so listing stays fast on
  transcripts of many megabytes.
- ``listing``: what every session list shares: its length, newest first, one-line titles.

Per agent: ``claude``, ``codex``, ``pi``, ``opencode`` (also Kilo). See
docs/session-handoff.md for the design and the per-adapter matrix.
"""
