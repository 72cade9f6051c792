"""``nlhf label add``: import comparison tasks, from a file or sampled from policies.

    nlhf label add --db labels.sqlite --input pairs.jsonl      # prompt/response_a/response_b
    nlhf label add --db labels.sqlite --input clips.jsonl      # instruction/clip_a/clip_b
    nlhf label add --db labels.sqlite --input pairs.csv --prompt-field question \\
        --a-field left --b-field right --skip-bad-rows
    nlhf label add --db labels.sqlite --policy runs/sft/model --prompts prompts.jsonl --n 100
    nlhf label add --db labels.sqlite --policy runs/nash/model --opponent runs/sft/model \\
        --prompts prompts.jsonl --max-new-tokens 96

A task is a prompt and two responses, or an instruction and two clips (rows with ``clip_a``
and ``clip_b``: GIF or WebM files, paths relative to the task file, at most 8 MB each).
Input rows: see :mod:`nlhf.label.tasks` (JSONL, JSON, CSV or TSV; a prompt may be text or
chat turns).  Generation: see
:mod:`nlhf.label.generate` (two samples of --policy, or --policy against --opponent).
Adding the same task twice stores it once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from nlhf.config import Checked, option
from nlhf.data import PromptColumn, load_prompts
from nlhf.label.store import LabelStore
from nlhf.label.tasks import TaskColumns, TaskInput, read_tasks


@dataclass
class Config(Checked):
    """Add comparison tasks (prompt, response A, response B) to the labeling database, from
    --input, or sampled from --policy (and --opponent) on --prompts.  Clip tasks: rows of
    --input with clip_a and clip_b (GIF or WebM files, paths relative to the file, 8 MB at
    most each) and the instruction shown above them in instruction (or --prompt-field)."""

    db: str = option(
        "labels.sqlite", "labeling database: a SQLite file (created if missing) or a SQLAlchemy URL"
    )
    input: str = option(
        "", "file of tasks (.jsonl, .json, .csv, .tsv, optionally .gz); text or clip tasks"
    )
    prompt_field: str = option("prompt", "field holding the prompt (in --input and --prompts)")
    a_field: str = option("response_a", "field holding response A in --input")
    b_field: str = option("response_b", "field holding response B in --input")
    skip_bad_rows: bool = option(False, "skip and count bad rows instead of stopping at the first")
    source: str = option("", "source recorded with the tasks (default: the file or model name)")
    policy: str = option("", "folder of a causal LM that writes the responses")
    opponent: str = option("", "second model for response B; empty: two samples of --policy")
    prompts: str = option("", "prompt file for generation (.jsonl/.csv with a prompt field)")
    n: int = option(0, "use the first n prompts (0: all)")
    max_new_tokens: int = option(64, "longest response, in tokens")
    temperature: float = option(1.0, "sampling temperature")
    top_p: float = option(1.0, "nucleus sampling: keep the smallest token set with this mass")
    seed: int = option(0, "random seed of the sampler")
    batch_size: int = option(8, "prompts sampled per batch")

    def check(self) -> None:
        generating = bool(self.policy or self.opponent or self.prompts)
        if bool(self.input) == generating:
            raise ValueError("give either --input FILE, or --policy MODEL with --prompts FILE")
        if generating and not (self.policy and self.prompts):
            raise ValueError("generation needs both --policy and --prompts")
        self.at_least(0, "n")
        self.at_least(1, "max_new_tokens")
        if self.temperature <= 0 or not 0 < self.top_p <= 1:
            raise ValueError("temperature must be > 0 and top_p in (0, 1]")


def generated_tasks(config: Config) -> tuple[list[TaskInput], str]:
    from nlhf.label.generate import load_model, tasks_from_policies  # noqa: PLC0415 - torch

    prompts = load_prompts(
        config.prompts, PromptColumn(prompt=config.prompt_field), skip_bad_rows=config.skip_bad_rows
    )
    chosen = [p.content for p in prompts][: config.n or None]
    policy = load_model(config.policy)
    opponent = load_model(config.opponent) if config.opponent else None
    source = config.source or (
        f"{policy.name} vs {opponent.name}" if opponent else f"{policy.name} samples"
    )
    tasks, dropped = tasks_from_policies(
        policy,
        chosen,
        opponent=opponent,
        max_new_tokens=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p if config.top_p < 1 else None,
        seed=config.seed,
        batch_size=config.batch_size,
        source=source,
    )
    note = f"{len(chosen)} prompts sampled"
    if dropped:
        note += f", {dropped} pairs dropped (empty or identical responses)"
    return tasks, note


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def run(config: Config) -> int:
    if config.input:
        columns = TaskColumns(
            prompt=config.prompt_field, response_a=config.a_field, response_b=config.b_field
        )
        tasks, skipped = read_tasks(config.input, columns, skip_bad_rows=config.skip_bad_rows)
        name = Path(config.input).name
        tasks = [replace(t, source=config.source or t.source or name) for t in tasks]
        note = f"{len(tasks)} rows read" + (f", {skipped.summary()}" if skipped else "")
    else:
        tasks, note = generated_tasks(config)
    store = LabelStore(config.db, create=True)
    try:
        added, existing = store.add_tasks(tasks)
        total, _ = store.task_counts(1)
    finally:
        store.close()
    print(
        f"nlhf label add: {plural(added, 'task')} added, {existing} already present ({note}); "
        f"{total} in all"
    )
    return 0
