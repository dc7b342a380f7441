"""The process's own file descriptor limit, raised at start.

A service manager starts a process with a soft ``RLIMIT_NOFILE`` of 1,024 unless told
otherwise, while the hard limit it may raise itself to is usually far higher: a server that
holds one descriptor per connection (two when it copies to a backend) runs out long before the
machine does. Raising the soft limit needs no privilege.
"""

from __future__ import annotations

import resource

#: never ask for more than this, even where the hard limit is unlimited
CEILING = 1 << 20


def raise_open_files() -> int:
    """The soft limit on open files raised toward the hard one; the soft limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = CEILING if hard == resource.RLIM_INFINITY else min(hard, CEILING)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass  # a container may refuse: the limit stays as it was
    return CEILING if soft == resource.RLIM_INFINITY else soft
