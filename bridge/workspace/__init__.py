"""Projects and what a client reads of them: the project list, workspace views (status, diff,
files), and git.
"""
