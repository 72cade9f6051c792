"""``nlhf assets``: which embedded defaults are installed and cached, and how to get the rest.

    nlhf assets              # a table: package, installed version, path, size, what to do
    nlhf assets --convert    # convert the SmolLM2 GGUF to the safetensors cache now (once)
    nlhf assets --sample     # load the policy and print its reply to a chat prompt
    nlhf assets --json       # the same records as JSON, for scripts

Exits with status 1 when a package is missing or a requested step failed, else 0.  The cache
folder is $NLHF_CACHE, else $XDG_CACHE_HOME/nlhf, else ~/.cache/nlhf (see :mod:`nlhf.assets`).
"""

from __future__ import annotations

import json as jsonlib
import sys
import time
from dataclasses import asdict, dataclass

from nlhf.assets import AssetError, AssetStatus, asset_status, cache_dir, policy_path
from nlhf.config import option


@dataclass
class Config:
    """Show the embedded defaults (policy LM, encoder, VADER, movie reviews): installed
    versions, cached paths, sizes, and the pip command for anything missing."""

    convert: bool = option(
        False, "convert the SmolLM2 GGUF to the safetensors cache now (once; tens of seconds)"
    )
    sample: bool = option(
        False, "load the policy (converting it if needed) and print its reply to a chat prompt"
    )
    prompt: str = option("Write one sentence about a film you like.", "the prompt for --sample")
    json: bool = option(False, "print the records as JSON instead of a table")


def human_size(size: int | None) -> str:
    """``1234567`` → ``"1.2 MB"``; None → ``"-"``."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def format_table(records: list[AssetStatus]) -> str:
    """A plain-text table of the records, then one line per asset that needs a step."""
    rows = [("asset", "package", "pinned", "installed", "size", "ready", "path")]
    for r in records:
        ready = "yes" if r.ready else "no"
        rows.append(
            (
                r.name,
                r.package,
                r.required,
                r.version or "-",
                human_size(r.size_bytes),
                ready,
                r.path or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    for r in records:
        if r.note:
            lines.append(f"{r.name}: {r.note}")
        if r.version is None:
            lines.append(f"    install: {r.install}")
    return "\n".join(lines)


def _sample(prompt: str) -> str:
    import torch  # noqa: PLC0415 - the status table loads no torch, only --sample does
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    folder = policy_path()
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    loaded = time.perf_counter() - start
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=48, do_sample=False)
    reply = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    return (
        f"policy {folder}: loaded in {loaded:.2f} s, dtype {model.dtype}, "
        f"{model.num_parameters() / 1e6:.1f}M parameters; reply in "
        f"{time.perf_counter() - start:.1f} s:\n  user: {prompt}\n  assistant: {reply.strip()}"
    )


def run(config: Config) -> int:
    failed = False
    if config.convert or config.sample:
        try:
            if config.sample:
                # with --json, stdout carries only the JSON document
                print(_sample(config.prompt), file=sys.stderr if config.json else sys.stdout)
            else:
                print(f"policy ready: {policy_path()}", file=sys.stderr)
        except AssetError as exc:
            print(f"nlhf assets: {exc}", file=sys.stderr)
            failed = True
    records = asset_status()
    if config.json:
        print(
            jsonlib.dumps(
                {"cache_dir": str(cache_dir()), "assets": [asdict(r) for r in records]}, indent=2
            )
        )
    else:
        print(f"cache folder: {cache_dir()}\n{format_table(records)}")
    missing = any(r.version is None and not r.ready for r in records)
    return 1 if failed or missing else 0
