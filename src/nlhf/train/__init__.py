"""Training: judges (reward and preference models) and the alignment algorithms.

Each ``nlhf train <name>`` command is a module here with a ``Config`` dataclass and ``run``.
"""
