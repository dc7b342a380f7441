"""Finding and loading adapters: the registry, drop-in files and entry points, the import probe,
ACP agents from the config.
"""
