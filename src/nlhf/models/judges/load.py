"""``--judge``: one spec string for every kind of judge, and the options that go with it.

    judge = load_judge("vader")
    judge = load_judge("runs/rm/model")                     # nlhf reward or preference model
    judge = load_judge("path/to/classifier", JudgeOptions(label="POSITIVE"))
    judge = load_judge("path/to/instruct-lm")               # pairwise causal-LM judge
    judge = load_judge("http://127.0.0.1:8780")             # a judge server
    judge = load_judge("python:my_module:score")            # score(prompt, completion) -> float
    judge = load_judge("population:default")                # or population:groups.yaml

A folder (or hub name) is told apart by what it holds: ``nlhf_judge.json`` (written by
``nlhf train reward-model|preference-model``), else the ``architectures`` in its
``config.json`` (…ForSequenceClassification: a classifier judge; …ForCausalLM: a pairwise
judge).  ``JudgeFields`` are the ``judge_*`` options of a command; ``options()`` gives the
:class:`JudgeOptions` a loader reads.  With ``judge_cache`` (the default) the judge sits behind
a cache (nlhf.models.judges.cache).
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from transformers import AutoConfig

from nlhf.config import Checked, option
from nlhf.models.errors import ModelError
from nlhf.models.judges.base import FunctionJudge, Judge, JudgeOptions, LexiconJudge, ScoreJudge
from nlhf.models.judges.cache import cached
from nlhf.models.judges.classifier import SequenceClassifierJudge
from nlhf.models.judges.length import length_penalized
from nlhf.models.judges.pairwise import PairwiseLMJudge
from nlhf.models.judges.population import (
    CRITERIA,
    DEFAULT,
    AnnotatorGroup,
    Criterion,
    PopulationJudge,
)
from nlhf.models.judges.remote import remote_judge
from nlhf.models.judges.trained import trained_judge
from nlhf.models.lm import DTYPES
from nlhf.models.reward_model import KIND_FILE

JUDGE_HELP = (
    "judge: vader; a folder from nlhf train reward-model|preference-model; any sequence "
    "classifier or causal LM folder (hub name with hub access); http://HOST:PORT of "
    "nlhf judge serve; python:module:function; population:default or population:FILE.yaml"
)


@dataclass
class JudgeFields(Checked):
    """How the judge runs and reads its input (see ``nlhf.models.judges``)."""

    judge_device: str = option("cpu", "device of the judge: cpu, cuda, cuda:1, mps, auto")
    judge_dtype: str = option("float32", "judge weights: float32, bfloat16, float16")
    judge_batch_size: int = option(32, "inputs per judge forward pass (sorted by length)")
    judge_max_length: int = option(512, "tokens per judge input; longer ones lose the start")
    judge_label: str = option(
        "", "classifier judges: the class whose probability is the score (name or index)"
    )
    judge_separator: str = option(
        "\n", "classifier judges without a chat template: text between prompt and completion"
    )
    judge_completion_only: bool = option(
        False, "classifier judges: score the completion alone (e.g. a sentiment classifier)"
    )
    judge_template: str = option(
        "", "pairwise LM judges: prompt template with {prompt}, {a}, {b} (empty: the default)"
    )
    judge_answers: str = option("A,B", "pairwise LM judges: the two answers (first, second)")
    judge_token: str = option("", "judge servers: the token (needed beyond loopback)")
    judge_cache: bool = option(True, "remember judged comparisons instead of recomputing them")
    judge_length_penalty: float = option(
        0.0,
        "penalty per word of the completion, on a score judge's score or on the logit of a "
        "pairwise judge's P (0: none; against the length growth of preference optimization)",
    )

    def check(self) -> None:
        if self.judge_batch_size < 1 or self.judge_max_length < 16:
            raise ValueError("judge_batch_size must be ≥ 1 and judge_max_length ≥ 16")
        if not abs(penalty := self.judge_length_penalty) <= 100:  # NaN, ±inf and 1e308 too
            raise ValueError(f"judge_length_penalty must be in [-100, 100], got {penalty}")

        if self.judge_dtype not in DTYPES:
            raise ValueError(f"judge_dtype must be one of {', '.join(DTYPES)}")

    def judge_options(self) -> JudgeOptions:
        return JudgeOptions(
            device=self.judge_device,
            dtype=self.judge_dtype,
            batch_size=self.judge_batch_size,
            max_length=self.judge_max_length,
            label=self.judge_label,
            separator=self.judge_separator,
            completion_only=self.judge_completion_only,
            template=self.judge_template,
            answers=self.judge_answers,
            token=self.judge_token,
            cache=self.judge_cache,
            length_penalty=self.judge_length_penalty,
        )


def architecture(where: str) -> str:
    """The first architecture named in the config of the model at ``where``."""
    path = Path(where)
    if path.is_dir():
        config_file = path / "config.json"
        if not config_file.exists():
            raise ModelError(f"{where}: not a judge: no nlhf_judge.json, no config.json")
        names = json.loads(config_file.read_text()).get("architectures") or []
    else:
        try:
            names = AutoConfig.from_pretrained(where).architectures or []
        except (OSError, ValueError) as exc:
            raise ModelError(
                f"{where}: no such judge folder, and not a hub model ({exc})"
            ) from None
    if not names:
        raise ModelError(
            f"{where}: not a judge: its config.json names no architecture (a judge folder holds "
            "a sequence classifier, a causal LM, or nlhf_judge.json)"
        )
    return names[0]


def python_judge(spec: str) -> FunctionJudge:
    module, _, name = spec.removeprefix("python:").rpartition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ModelError(f"{spec}: cannot import the score function ({exc})") from None
    if not callable(fn):
        raise ModelError(f"{spec}: not a function")
    return FunctionJudge(fn)


def build_judge(spec: str, options: JudgeOptions) -> Judge:
    """The judge ``spec`` names, without the cache."""
    if spec == "vader":
        return LexiconJudge()
    if spec.startswith(("http://", "https://")):
        return remote_judge(spec, options.token)
    if spec.startswith("python:"):
        return python_judge(spec)
    if spec.startswith("population:"):
        return population_judge(spec.removeprefix("population:"))
    path = Path(spec)
    if path.is_dir() and (path / KIND_FILE).exists():
        return trained_judge(path, options)
    if not path.exists() and (spec.startswith((".", "/", "~")) or spec.count("/") > 1):
        raise ModelError(f"{spec}: no such judge folder")
    kind = architecture(spec)
    if kind.endswith("ForSequenceClassification"):
        return SequenceClassifierJudge.load(spec, options)
    if kind.endswith(("ForCausalLM", "LMHeadModel")):
        return PairwiseLMJudge.load(spec, options)
    raise ModelError(
        f"{spec}: a {kind} is neither a sequence classifier nor a causal LM, so not a judge"
    )


def criterion(spec: str) -> Criterion:
    """A population group's criterion: a built-in one (``CRITERIA``) or a score judge's spec
    (``python:module:function``, ``vader``, a reward-model folder, …)."""
    if spec in CRITERIA:
        return CRITERIA[spec][0]()
    judge = build_judge(spec, JudgeOptions(cache=False))
    if not isinstance(judge, ScoreJudge):
        raise ModelError(f"criterion {spec!r}: a criterion needs a score judge, not a pairwise one")
    return judge.scores


def population_from_definition(
    definition: dict[str, Any], where: str = "population"
) -> PopulationJudge:
    """The population a definition ``{"groups": [{name, criterion, weight, temperature}]}``
    describes (``where`` names it in errors)."""
    groups_in = definition.get("groups") if isinstance(definition, dict) else None
    if not isinstance(groups_in, list) or not groups_in:
        raise ModelError(f"{where}: needs a list 'groups' of name, criterion, weight, temperature")
    groups = []
    for i, g in enumerate(groups_in):
        if not isinstance(g, dict) or "criterion" not in g:
            raise ModelError(f"{where}: groups[{i}] needs a 'criterion'")
        unknown = set(g) - {"name", "criterion", "weight", "temperature"}
        if unknown:
            raise ModelError(f"{where}: groups[{i}]: unknown field(s) {sorted(unknown)}")
        try:
            weight, temperature = float(g.get("weight", 1.0)), float(g.get("temperature", 1.0))
        except (TypeError, ValueError):
            raise ModelError(f"{where}: groups[{i}]: weight and temperature are numbers") from None
        name = str(g.get("name", g["criterion"]))
        groups.append(AnnotatorGroup(name, criterion(str(g["criterion"])), weight, temperature))
    return PopulationJudge(groups, definition)


def population_judge(spec: str) -> PopulationJudge:
    """``default`` (positivity, brevity, vocabulary) or a YAML file with ``groups``."""
    if spec == "default":
        return population_from_definition(DEFAULT, "population:default")
    path = Path(spec)
    if not path.is_file():
        raise ModelError(f"population:{spec}: no such file (or give population:default)")
    try:
        definition = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ModelError(f"{spec}: not a readable YAML population ({exc})") from None
    return population_from_definition(definition, spec)


def load_judge(spec: str, options: JudgeOptions | None = None) -> Judge:
    """The judge ``spec`` names (see the module doc), behind a cache unless told otherwise."""
    options = options or JudgeOptions()
    judge = build_judge(spec, options)
    if options.length_penalty:
        judge = length_penalized(judge, options.length_penalty)
    return cached(judge) if options.cache else judge
