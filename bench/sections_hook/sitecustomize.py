"""Loaded at interpreter start by a daemon that bench/sections.py measures."""

import os

if os.environ.get("BENCH_SECTIONS_OUT"):
    from bench import sections

    sections.install()
