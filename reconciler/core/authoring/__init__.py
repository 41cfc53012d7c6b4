"""What the CLI writes into a config repo (pure: files in, files out).

The package, one concern a module (each says what must live in it):

- ``submit``: the edits of ``submit``, ``stop`` and ``rerun`` to an operation file;
- ``importers``: Polyaxon and Kueue files converted into this repo's kinds.
"""
