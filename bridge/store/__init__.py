"""The durable side: the SQLite store, its event rows, its health checks, and the lock that keeps
one daemon per state directory.
"""
