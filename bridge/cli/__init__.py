"""The command line: its subcommands, the client it talks to the daemon with, the renderer, the
service installer, doctor.
"""
