"""The policies of a tournament: parse their specs and find their base models.

    from nlhf.eval.entrants import parse_entrants
    entrants, reference = parse_entrants(["reference", "rlhf=runs/ppo/policy", "runs/nash/policy"])

A spec is one of

- ``reference``: the reference policy μ itself (the ``reference`` option of the tournament,
  or, when that is empty, the base model of the first LoRA adapter among the policies);
- a folder written by ``Policy.save``: a full model, or a peft LoRA adapter (it holds
  ``adapter_config.json``), which loads onto the base model its config names (keywords such
  as ``smollm2`` and paths relative to the adapter folder are resolved; an empty base means
  the reference);
- a hub name or an embedded keyword (``smollm2``), passed to :func:`nlhf.assets.resolve_model`.

Any spec may carry a display name: ``name=spec`` (the name may not contain ``/``).  Without
one the name is the spec's last two path components (``nash-md/policy``) or the spec itself.
Loading them is :mod:`nlhf.eval.rollouts`' job (with :func:`nlhf.models.lm.load_causal_lm`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nlhf.assets import resolve_model
from nlhf.config import ConfigError
from nlhf.errors import UserError

REFERENCE = "reference"


@dataclass(frozen=True)
class Entrant:
    """One policy of the tournament, resolved but not loaded."""

    name: str
    spec: str
    """the spec without its display name (the name, unique in a run, salts the sampling
    seeds: the same policy samples the same texts wherever its folder lies)."""
    kind: Literal["reference", "adapter", "model"]
    path: str
    """what loads: the model folder or name, the adapter folder, or the reference's path."""
    base: str | None = None
    """adapters: the base model they load onto."""


def _split_label(spec: str) -> tuple[str | None, str]:
    label, sep, rest = spec.partition("=")
    if sep and label and "/" not in label and rest:
        return label.strip(), rest.strip()
    return None, spec.strip()


def default_name(spec: str) -> str:
    parts = [p for p in Path(spec).parts if p not in ("/", ".")]
    return "/".join(parts[-2:]) if len(parts) > 1 else spec


def same_model(a: str | None, b: str | None) -> bool:
    """True when two resolved model specs name the same thing (same folder on disk)."""
    if a is None or b is None:
        return False
    if os.path.exists(a) and os.path.exists(b):
        return os.path.realpath(a) == os.path.realpath(b)
    return a == b


def adapter_base(folder: Path) -> str:
    """The base model named in an adapter's config, resolved; "" when it names none."""
    config_path = folder / "adapter_config.json"
    try:
        name = json.loads(config_path.read_text()).get("base_model_name_or_path") or ""
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{config_path}: cannot read the adapter config: {exc}") from None
    if not name:
        return ""
    if os.path.exists(name):
        return name
    beside = folder / name
    if beside.exists():
        return str(beside)
    return resolve_model(name, "policy")


def parse_entrants(specs: list[str], reference: str = "") -> tuple[list[Entrant], str | None]:
    """Resolve policy specs; returns the entrants and the reference's path (None if none)."""
    if len(specs) < 2:
        raise ConfigError(f"a tournament needs at least 2 policies, got {len(specs)}: {specs}")
    try:
        ref_path = resolve_model(reference, "policy") if reference else None
    except UserError as exc:
        raise ConfigError(f"reference {reference!r}: {exc}") from None
    parsed = []
    for i, raw in enumerate(specs):
        label, spec = _split_label(raw)
        if not spec:
            raise ConfigError(f"policies[{i}]: empty spec")
        folder = Path(os.path.expanduser(spec))
        if spec == REFERENCE:
            parsed.append((label, spec, "reference", "", None))
        elif (folder / "adapter_config.json").is_file():
            parsed.append((label, spec, "adapter", str(folder), adapter_base(folder)))
        else:
            try:
                path = resolve_model(spec, "policy")
            except UserError as exc:
                raise ConfigError(f"policies[{i}] {spec!r}: {exc}") from None
            parsed.append((label, spec, "model", path, None))
    if ref_path is None:
        ref_path = next((p[4] for p in parsed if p[2] == "adapter" and p[4]), None)
    entrants, seen = [], set()
    for i, (label, spec, kind, path, base) in enumerate(parsed):
        if kind == "reference":
            if ref_path is None:
                raise ConfigError(
                    f"policies[{i}] is 'reference' but no reference is known: set the "
                    "reference option (e.g. smollm2) or include a LoRA adapter whose config "
                    "names its base model"
                )
            path = ref_path
        if kind == "adapter" and not base:
            if ref_path is None:
                raise ConfigError(
                    f"policies[{i}] {spec}: adapter_config.json names no base model; set the "
                    "reference option to the model it was trained on"
                )
            base = ref_path
        name = label or (REFERENCE if kind == "reference" else default_name(spec))
        if name in seen:
            raise ConfigError(f"policies[{i}]: the name {name!r} is used twice; name it: NAME=spec")
        seen.add(name)
        entrants.append(Entrant(name, spec, kind, path, base))
    return entrants, ref_path


def same_vocabulary(a: Any, b: Any) -> bool:
    """Whether two tokenizers map the same strings to the same ids (needed for the KL)."""
    return a is b or a.get_vocab() == b.get_vocab()
