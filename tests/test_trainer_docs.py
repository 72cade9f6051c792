"""tests/trainer_docs.py, which the trainers' tests use to read the metrics each one documents:
the markdown section, the docstring fallback, and every trainer having a list."""

import pytest

from nlhf.cli import COMMANDS
from trainer_docs import logged_metrics, metrics_in_docstring, metrics_in_markdown

MARKDOWN = """
## nlhf train nash-md

### Parameters

- `tau`: not a metric

### Logged metrics

Means over the step.

- `loss`: the surrogate loss, see `tau`
- `length`, `mixture_length`: tokens, EOS included
  `not_an_item`: a continuation line

## nlhf train ppo

### Logged metrics

- `reward`: mean judge score
"""

DOCSTRING = """``nlhf train x``: a trainer.

Logged metrics (metrics.jsonl, TensorBoard), one line per step:

- of the rollout: ``reward``, ``kl_coef`` (the β, before ``adaptive_kl`` moves it);
- timings: ``sample_seconds``

Parameters: ``lr`` is not logged.
"""


def test_the_markdown_section_gives_the_leading_names_of_its_list_items():
    assert metrics_in_markdown(MARKDOWN, "nash-md") == {"loss", "length", "mixture_length"}
    assert metrics_in_markdown(MARKDOWN, "ppo") == {"reward"}
    assert metrics_in_markdown(MARKDOWN, "sft") is None
    assert metrics_in_markdown("## nlhf train sft\n\n### Method\n", "sft") is None


def test_the_docstring_fallback_skips_parenthesized_parameters_and_later_paragraphs():
    assert metrics_in_docstring(DOCSTRING) == {"reward", "kl_coef", "sample_seconds"}
    assert metrics_in_docstring("no such paragraph") == set()


@pytest.mark.parametrize("name", sorted(COMMANDS["train"].commands))
def test_every_trainer_documents_what_it_logs(name):
    module = COMMANDS["train"].commands[name].module.rpartition(".")[2]
    assert {"loss", "lr", "step_seconds"} <= logged_metrics(name, module)
