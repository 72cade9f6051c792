"""``nlhf eval``: the tournament among policies — win-rate matrix, KL, scores, heat map.

    nlhf eval --policies reference,nash=runs/nash-md/policy,ppo=runs/ppo/policy
    nlhf eval --policies reference,runs/nash-md/policy --judges vader,runs/pm/model \\
        num_prompts=128 samples_per_prompt=4 --out runs/tournament

Writes ``tournament.json``, ``tournament.md`` and ``heatmap.png`` into ``--out`` and prints
the win-rate table of the first judge.  With ``--frontier`` the policies are training runs
(``METHOD=RUN``; a method named twice has a run per seed) and every kept checkpoint becomes a
(KL, win rate) point (:mod:`nlhf.eval.frontier`: frontier.json, frontier.md, frontier.png).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from nlhf.config import ConfigError, option
from nlhf.data.prompts import PromptFields, load_prompt_texts
from nlhf.eval.entrants import default_name, parse_entrants
from nlhf.eval.frontier import parse_runs, run_frontier, verdicts
from nlhf.eval.report import matrix_table
from nlhf.eval.rollouts import Sampling
from nlhf.eval.tournament import run_tournament
from nlhf.files import check_folder_option
from nlhf.models.judges import load_judge
from nlhf.models.judges.load import JUDGE_HELP, JudgeFields
from nlhf.models.lm import load_tokenizer


@dataclass
class Config(Sampling, PromptFields, JudgeFields):
    """Tournament among policies: every pair compared by every judge on the same prompts,
    P(row ≻ column) with 95% intervals over prompts, KL to the reference, scores, lengths."""

    policies: list[str] = option(
        [],
        "policies (at least 2): reference (the base policy μ), a folder from Policy.save "
        "(full model or LoRA adapter), smollm2 or a hub name; NAME=spec sets a display name",
    )
    reference: str = option(
        "",
        "the reference μ (for 'reference' and the KL): smollm2, a folder or a hub name; "
        "empty: the base model named by the first LoRA adapter among the policies",
    )
    judges: list[str] = option(["vader"], "judges, each one of: " + JUDGE_HELP.split(": ", 1)[1])
    num_prompts: int = option(64, "prompts used: the first this many of the prompt set")
    pairing: Literal["all", "aligned"] = option(
        "all",
        "comparisons per prompt and pair: all sample pairs (S²) or sample j vs sample j (S); "
        "free for score judges, S× the calls for a preference model",
    )
    level: float = option(0.95, "confidence level of the intervals")
    interval: Literal["t", "bootstrap"] = option(
        "t", "interval over per-prompt means: Student t or a percentile bootstrap"
    )
    judge_batch_size: int = option(64, "completions or comparisons per judge call")
    show_samples: int = option(3, "prompts whose first completion each policy shows in the report")
    out: str = option(
        "runs/tournament", "output folder: tournament.json, tournament.md, heatmap.png"
    )
    progress: bool = option(True, "show progress bars")
    frontier: bool = option(
        False,
        "policies are training --out folders (METHOD=RUN, a method once per seed): every kept "
        "checkpoint becomes a (KL, win rate against the reference) point; methods compared "
        "at matched KL under the first judge",
    )
    targets: list[float] = option(
        [0.5, 1.0, 2.0, 4.0, 8.0], "--frontier: the KLs (nats) of the head-to-head games"
    )
    bon: list[int] = option(
        [1, 2, 4, 8, 16], "--frontier: best-of-n of the reference drawn as a reference curve"
    )
    resamples: int = option(1000, "--frontier: bootstrap resamples of the bands and verdicts")

    def check(self) -> None:
        if self.frontier:
            if not self.policies:
                raise ValueError("policies: give at least one run (METHOD=RUN) with --frontier")
            if any(t <= 0 for t in self.targets):
                raise ValueError(f"targets must be > 0 nats, got {self.targets}")
            if any(n < 1 for n in self.bon):
                raise ValueError(f"bon: every n must be ≥ 1, got {self.bon}")
            self.at_least(10, "resamples")
        elif len(self.policies) < 2:
            raise ValueError(f"policies: give at least 2, got {self.policies}")
        if not self.judges:
            raise ValueError("judges: give at least one")
        self.at_least(1, "num_prompts")
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"level must lie in (0, 1), got {self.level}")
        check_folder_option("out", self.out)


def sampling_of(config: Config) -> Sampling:
    return Sampling(**{f.name: getattr(config, f.name) for f in fields(Sampling)})


def prompt_texts(config: Config) -> list[str]:
    """The first ``num_prompts`` prompts of the set, rendered as the trainers render them
    (a chat template is the reference's, else the first policy's)."""
    tokenizer = None
    if config.chat_template:
        entrants, ref_path = parse_entrants(list(config.policies), config.reference)
        tokenizer = load_tokenizer(ref_path or entrants[0].path)
    texts = load_prompt_texts(config, config.seed, tokenizer)
    if len(texts) < config.num_prompts:
        raise ConfigError(
            f"prompts {config.prompts!r} has {len(texts)} prompts; num_prompts asks "
            f"{config.num_prompts}"
        )
    return texts[: config.num_prompts]


def run_frontier_command(config: Config) -> int:
    """``nlhf eval --frontier``: the frontier of every run's checkpoints, its verdicts."""
    tokenizer = None
    if config.chat_template:
        tokenizer = load_tokenizer(
            config.reference or str(Path(parse_runs(config.policies)[0][2]) / "policy")
        )
    texts = load_prompt_texts(config, config.seed, tokenizer)[: config.num_prompts]
    result = run_frontier(
        config.policies,
        texts,
        load_judge(config.judges[0], config.judge_options()),
        default_name(config.judges[0]),
        reference=config.reference,
        sampling=sampling_of(config),
        targets=config.targets,
        bon=config.bon,
        level=config.level,
        resamples=config.resamples,
        progress=config.progress,
        out=config.out,
    )
    print("\n".join(verdicts(result)))
    print(f"report: {config.out}/frontier.md (and frontier.json, frontier.png)")
    return 0


def run(config: Config) -> int:
    if config.frontier:
        return run_frontier_command(config)
    result = run_tournament(
        config.policies,
        prompt_texts(config),
        list(config.judges),
        reference=config.reference,
        sampling=sampling_of(config),
        pairing=config.pairing,
        level=config.level,
        interval=config.interval,
        show_samples=config.show_samples,
        judge_batch_size=config.judge_batch_size,
        judge_options=config.judge_options(),
        progress=config.progress,
        out=config.out,
    )
    judge, rates = next(iter(result.win_rates.items()))
    print(
        f"P(row ≻ column), judge {judge}, {len(result.prompts)} prompts × "
        f"{config.samples_per_prompt} samples:"
    )
    print(matrix_table(result.names, rates.mean, rates.low, rates.high, "P(row ≻ col)"))
    for (a, b), d in result.disagreements.items():
        print(f"{a} and {b} pick different winners in {d.overall.mean:.3f} of comparisons")
    print(f"report: {config.out}/tournament.md (and tournament.json, heatmap.png)")
    return 0
