"""nlhf: align language models with pairwise human preferences, by RLHF and by NLHF.

Sub-packages:
    nlhf.tabular   exact preference games, Nash equilibria and learning dynamics (numpy only)
Command line: ``nlhf --help``.
"""

__version__ = "0.1.0"
