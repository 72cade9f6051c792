"""What each stage of ``nlhf demo`` runs: the per-stage configs of the (resolved) demo config.

Pure functions of the config and its run folder, so a test can check every choice without
training anything.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from nlhf.demo.config import Config
from nlhf.lm_stages import judge_configs
from nlhf.resumable import RunFolder
from nlhf.train import dno, inpo, nash_ema, nash_md, online_dpo, ppo, sppo


@dataclass(frozen=True)
class Method:
    """One policy the demo trains: its name, title and trainer config (whose module is the
    trainer's)."""

    name: str
    title: str
    config: Any
    comparisons_per_step: int
    """judge calls of one step: scores (PPO) or pairwise comparisons."""
    family: str = ""
    """the method it is a run of (empty: its own name): one frontier per family."""
    run: int = 0
    """which seed of the family (0: the config's seed); the runs of one seed, at every strength
    of the sweep, share it."""

    @property
    def group(self) -> str:
        return self.family or self.name


def imdb_judge_configs(config: Config, layout: RunFolder) -> dict[str, Any]:
    """The reward-model and preference-model configs: the same IMDB pairs and split."""
    imdb = dict(max_pairs=config.judge_pairs, imdb_words=config.judge_words)
    return judge_configs(config, layout, data="imdb", **imdb)


def _online_fields(
    config: Config, layout: RunFolder, name: str, judge: str, steps: int, batch_size: int
) -> dict[str, Any]:
    return dict(
        policy=config.policy,
        lora_r=config.lora_r,
        dtype=config.dtype,
        prompts=str(layout.train_prompts),
        judge=str(layout.judge(judge) / "model"),
        steps=steps,
        time_limit=config.minutes,
        batch_size=batch_size,
        max_new_tokens=config.max_new_tokens,
        seed=config.seed,
        out=str(layout.policy(name)),
        checkpoint_every=2 if name.startswith("ppo") else 5,  # points along the run
        keep_checkpoints=1000,
        progress=config.progress,
    )


GROUP_SAMPLES = 4
"""K of the methods that sample K completions per prompt (SPPO, INPO, ONPO, DNO)."""
GROUP_LR = 5e-4
"""Their learning rate: that of their example configs (configs/sppo.yaml, …)."""


def methods(config: Config, layout: RunFolder) -> list[Method]:
    """The plain runs (:func:`plain_methods`), then with ``seeds`` > 1 each one again from
    every further seed, and with ``frontier`` PPO and Nash-MD-PG at every strength of the
    sweep from every seed (:func:`sweep`)."""
    plain = plain_methods(config, layout)
    more = [_seeded(m, k, config, layout) for k in range(1, config.seeds) for m in plain]
    return plain + more + (sweep(config, layout, plain) if config.frontier else [])


def _seeded(method: Method, k: int, config: Config, layout: RunFolder) -> Method:
    name = f"{method.name}-seed{k}"
    own = replace(method.config, seed=config.seed + k, out=str(layout.policy(name)))
    title = f"{method.title}, seed {config.seed + k}"
    return replace(method, name=name, config=own, family=method.group, run=k, title=title)


def sweep(config: Config, layout: RunFolder, plain: list[Method]) -> list[Method]:
    """PPO at every fixed KL coefficient of ``ppo_kl_coefs`` (each with its learning rate of
    ``ppo_lrs``) and Nash-MD-PG at every τ of ``taus``, from every seed.  Each belongs to its
    method's family, ``ppo`` or ``nash-md``, as part of the run of its seed: a method's
    frontier is the envelope over the checkpoints of all its strengths, and the head-to-head
    at a target KL takes each method's checkpoint nearest it, whichever strength it came
    from."""
    by_name = {m.name: m for m in plain}
    out = []
    for k in range(config.seeds):
        suffix = f"-seed{k}" if k else ""
        strengths = [
            ("ppo", f"ppo-kl{beta:g}-lr{lr:g}", dict(init_kl_coef=beta, lr=lr, adaptive_kl=False))
            for beta, lr in zip(config.ppo_kl_coefs, config.ppo_lrs, strict=True)
        ] + [("nash-md", f"nash-md-tau{tau:g}", dict(tau=tau)) for tau in config.taus]
        for name, label, fields in strengths:
            own = replace(
                by_name[name].config,
                **fields,
                seed=config.seed + k,
                out=str(layout.policy(label + suffix)),
            )
            shown = ", ".join(f"{f} {v:g}" for f, v in fields.items() if f != "adaptive_kl")
            title = f"{by_name[name].title}, {shown}, seed {config.seed + k}"
            calls = by_name[name].comparisons_per_step
            out.append(Method(label + suffix, title, own, calls, name, k))
    return out


def plain_methods(config: Config, layout: RunFolder) -> list[Method]:
    """RLHF-PPO and Nash-MD-PG; with ``all_methods`` the rest of the Nash family too
    (:func:`nash_family`)."""
    n = config.batch_size
    ppo_fields = _online_fields(config, layout, "ppo", "reward-model", config.ppo_steps, n)
    ppo_config = ppo.Config(**ppo_fields, lr=config.ppo_lr, init_kl_coef=config.ppo_kl_coef)
    nash_fields = _online_fields(config, layout, "nash-md", "preference-model", config.steps, n)
    nash = dict(lr=config.nash_lr, tau=config.tau, beta=config.beta)
    chosen = [
        Method("ppo", "RLHF-PPO vs the reward model", ppo_config, n),
        Method(
            "nash-md",
            f"Nash-MD-PG (β = {config.beta:g}) vs the preference model",
            nash_md.Config(**nash_fields, **nash),
            n,
        ),
    ]
    return chosen + nash_family(config, layout) if config.all_methods else chosen


def nash_family(config: Config, layout: RunFolder) -> list[Method]:
    """Self-play, Nash-EMA, MPO and online IPO on the batch of Nash-MD-PG; SPPO, INPO, ONPO and
    DNO on half the prompts with K samples each, so that each step decodes as many completions
    as a Nash-MD-PG step (policy and opponent: 2 per prompt).  All for ``config.steps``."""
    n, k = config.batch_size, GROUP_SAMPLES
    half = max(1, n // 2)
    nash = dict(lr=config.nash_lr, tau=config.tau)
    group = dict(samples=k, lr=GROUP_LR)
    pairs, knockout = half * k * (k - 1) // 2, half * (3 * k // 2 - 1)
    table = [  # name, title, config class, its own fields, prompts per step, judge calls
        ("self-play", "Nash-MD-PG self-play (β = 0)", nash_md.Config, dict(beta=0.0, **nash), n, n),
        ("nash-ema", "Nash-EMA", nash_ema.Config, nash, n, n),
        ("mpo", "MPO (magnet reset every 10 steps)", nash_md.MpoConfig,
         dict(magnet_every=10, **nash), n, n),
        ("online-ipo", "online IPO (soft labels)", online_dpo.Config,
         dict(loss_type="ipo", label="soft", lr=GROUP_LR), n, n),
        ("sppo", f"SPPO (K = {k})", sppo.Config, group, half, pairs),
        ("inpo", f"INPO (K = {k})", inpo.Config, group, half, knockout),
        ("onpo", f"ONPO (K = {k})", inpo.OnpoConfig, group, half, knockout),
        ("dno", f"DNO (K = {k})", dno.Config, group, half, pairs),
    ]  # fmt: skip

    def method(name: str, title: str, cls: type, own: dict, batch: int, calls: int) -> Method:
        fields = _online_fields(config, layout, name, "preference-model", config.steps, batch)
        return Method(name, f"{title} vs the preference model", cls(**fields, **own), calls)

    return [method(*row) for row in table]


def tournament_entrants(config: Config, layout: RunFolder) -> list[str]:
    """``reference`` and every plain run's final policy (the config's seed), as ``nlhf eval``
    specs; the other seeds and the sweep are read on the frontier."""
    return ["reference"] + [
        f"{m.name}={layout.policy(m.name) / 'policy'}" for m in plain_methods(config, layout)
    ]


def frontier_runs(config: Config, layout: RunFolder) -> list[str]:
    """Every run of PPO and Nash-MD-PG as a frontier spec, ``FAMILY#SEED=FOLDER``: the plain
    runs (with their other seeds), and with ``frontier`` every strength of the two sweeps in
    the run of its seed."""
    return [
        f"{m.group}#{m.run}={layout.policy(m.name)}"
        for m in methods(config, layout)
        if m.group in ("ppo", "nash-md")
    ]


def tournament_judges(config: Config, layout: RunFolder) -> dict[str, str]:
    """VADER (no method trained on it), the learned preference model, and ``config.judges``
    (each named by its spec)."""
    named = {"vader": "vader", "preference-model": str(layout.judge("preference-model") / "model")}
    return {**named, **{spec: spec for spec in config.judges}}
