"""Statistics of the packaged Anthropic HH file: pair count, empty replies, length baselines.

python -m nlhf.data
"""

from __future__ import annotations

from nlhf.data.baselines import compare_lengths
from nlhf.data.hh import hh_harmless_path, load_hh_harmless


def main() -> None:
    pairs = load_hh_harmless()
    print(f"{len(pairs)} pairs from {hh_harmless_path()}")
    print(f"empty chosen reply at indices {[i for i, p in enumerate(pairs) if not p.chosen]}")
    print("characters:", compare_lengths(pairs).describe())
    print("words:     ", compare_lengths(pairs, lambda t: len(t.split())).describe())
    train, held_out = pairs.split(0.2, seed=0)
    print(f"split(0.2, seed=0): {len(train)} train, {len(held_out)} held out;")
    print("  held out:", compare_lengths(held_out).describe())


if __name__ == "__main__":
    main()
