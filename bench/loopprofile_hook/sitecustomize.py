"""Loaded at interpreter start by a daemon the bench profiles without py-spy
(bench/loopprofile.py)."""

import os

if os.environ.get("BENCH_PROFILE_DIR"):
    from bench import loopprofile

    loopprofile.install()
