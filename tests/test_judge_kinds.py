"""Every kind of ``--judge``: hub-style classifiers, a pairwise causal LM, the cache.

The folders are tiny random-init models saved like hub models (tests/tiny_judges.py): no nlhf
metadata in them, so ``load_judge`` tells them apart by their ``config.json``.
"""

import time

import pytest
import torch

from nlhf.models.errors import ModelError
from nlhf.models.judges import FunctionJudge, JudgeOptions, ScoreJudge, cached, load_judge
from nlhf.models.judges.cache import CachedJudge, CachedScoreJudge
from nlhf.models.judges.classifier import SequenceClassifierJudge
from nlhf.models.judges.pairwise import PairwiseLMJudge
from tiny_judges import bert_classifier, llama_classifier, pairwise_lm

PROMPTS = ["Write a review.", "Write a review.", "Tell me about the plot."]
A = ["a great film", "it was awful", "the plot was good"]
B = ["an awful film", "a good item", "bad"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("judges")
    return {
        "bert-reward": bert_classifier(root / "bert-reward", 1),
        "bert-sentiment": bert_classifier(root / "bert-sentiment", 2),
        "llama-reward-chat": llama_classifier(root / "llama-reward-chat", 1, chat=True),
        "llama-sentiment": llama_classifier(root / "llama-sentiment", 2, chat=False),
        "pairwise-chat": pairwise_lm(root / "pairwise-chat", chat=True),
        "pairwise-plain": pairwise_lm(root / "pairwise-plain", chat=False),
    }


KINDS = [
    "bert-reward", "bert-sentiment", "llama-reward-chat", "llama-sentiment", "pairwise-chat",
    "pairwise-plain",
]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_is_antisymmetric_and_even_against_itself(folders, kind):
    judge = load_judge(str(folders[kind]), JudgeOptions(cache=False))
    expected = PairwiseLMJudge if kind.startswith("pairwise") else SequenceClassifierJudge
    assert isinstance(judge, expected)
    ab, ba = judge(PROMPTS, A, B), judge(PROMPTS, B, A)
    assert ab.dtype == torch.float32 and ab.shape == (3,)
    torch.testing.assert_close(ab + ba, torch.ones(3), atol=1e-6, rtol=0)
    torch.testing.assert_close(judge(PROMPTS, A, A), torch.full((3,), 0.5), atol=1e-6, rtol=0)
    assert ((ab > 0) & (ab < 1)).all() and not torch.allclose(ab, torch.full((3,), 0.5))


def test_classifiers_are_score_judges_and_the_named_class_is_the_score(folders):
    where = str(folders["bert-sentiment"])
    positive = load_judge(where, JudgeOptions(label="POSITIVE", cache=False))
    negative = load_judge(where, JudgeOptions(label="negative", cache=False))
    by_index = load_judge(where, JudgeOptions(label="0", cache=False))
    assert isinstance(positive, ScoreJudge)
    p, n = positive.scores(PROMPTS, A), negative.scores(PROMPTS, A)
    torch.testing.assert_close(p + n, torch.ones(3), atol=1e-6, rtol=0)  # two classes
    torch.testing.assert_close(by_index.scores(PROMPTS, A), n)
    torch.testing.assert_close(load_judge(where, JudgeOptions(cache=False)).scores(PROMPTS, A), p)
    with pytest.raises(ModelError, match="NEGATIVE"):
        load_judge(where, JudgeOptions(label="joy"))


def test_a_chat_template_or_the_separator_formats_the_input(folders):
    chat = load_judge(str(folders["llama-reward-chat"]), JudgeOptions(cache=False))
    assert chat.text("Q?", "yes") == "<|user|>Q?\n<|assistant|>yes\n"
    plain = load_judge(str(folders["bert-reward"]), JudgeOptions(separator=" || ", cache=False))
    assert plain.text("Q?", "yes") == "Q? || yes"
    alone = load_judge(
        str(folders["llama-reward-chat"]), JudgeOptions(completion_only=True, cache=False)
    )
    assert alone.text("Q?", "yes") == "yes"
    # the prompt changes the score unless only the completion is read
    x = chat.scores(["one prompt", "another prompt"], ["same", "same"])
    assert x[0] != x[1]
    y = alone.scores(["one prompt", "another prompt"], ["same", "same"])
    assert y[0] == y[1]


def test_long_inputs_are_cut_to_max_length(folders):
    judge = load_judge(str(folders["bert-reward"]), JudgeOptions(max_length=16, cache=False))
    long = " ".join(["film"] * 500)
    assert judge.scores([long], [long]).shape == (1,)


class BiasedTowardsA:
    """A stand-in LM whose next-token logits always favour the token of "A"."""

    def __init__(self, a_id: int, vocab: int) -> None:
        self.a_id, self.vocab = a_id, vocab
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def eval(self):
        return self

    def parameters(self):
        yield self.weight

    def __call__(self, input_ids, attention_mask, position_ids=None):
        logits = torch.zeros(*input_ids.shape, self.vocab)
        logits[..., self.a_id] = 2.0
        return type("Out", (), {"logits": logits})()


def test_the_pairwise_judge_averages_both_orders(folders):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folders["pairwise-chat"])
    judge = PairwiseLMJudge(BiasedTowardsA(tok.encode("A")[0], len(tok)), tok)
    first_a, first_b = judge.both_orders(PROMPTS, A, B)
    bias = float((0.5 * (first_a + first_b) - 0.5).mean())
    assert bias == pytest.approx(torch.sigmoid(torch.tensor(2.0)).item() - 0.5, abs=1e-6)
    torch.testing.assert_close(judge(PROMPTS, A, B), torch.full((3,), 0.5), atol=1e-6, rtol=0)
    torch.testing.assert_close(judge(PROMPTS, A, A), torch.full((3,), 0.5), atol=1e-6, rtol=0)


def test_the_pairwise_template_and_answers_are_options(folders):
    options = JudgeOptions(template="Q {prompt} | 1: {a} | 2: {b}", answers="1,2", cache=False)
    judge = load_judge(str(folders["pairwise-plain"]), options)
    assert judge.text("x", "y", "z").startswith("Q x | 1: y | 2: z\nAnswer:")
    with pytest.raises(ModelError, match="needs"):
        load_judge(str(folders["pairwise-plain"]), JudgeOptions(template="no fields"))
    with pytest.raises(ModelError, match="two"):
        load_judge(str(folders["pairwise-plain"]), JudgeOptions(answers="A"))


def forwards(judge) -> list[int]:
    calls = [0]
    judge.model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize("kind", ["bert-sentiment", "pairwise-plain"])
def test_the_cache_answers_repeats_without_a_forward(folders, kind):
    judge = load_judge(str(folders[kind]))
    assert isinstance(judge, CachedScoreJudge if kind == "bert-sentiment" else CachedJudge)
    calls = forwards(judge.judge)
    first = judge(PROMPTS, A, B)
    done = calls[0]
    assert done > 0
    torch.testing.assert_close(judge(PROMPTS, A, B), first, atol=0, rtol=0)
    torch.testing.assert_close(judge(PROMPTS, B, A), 1 - first, atol=1e-6, rtol=0)
    assert calls[0] == done and judge.hits >= 6


def test_the_cache_keeps_a_digest_of_the_texts_not_the_texts():
    judge = load_judge("vader")
    long_prompt = "x" * 1_000_000
    first = judge.scores([long_prompt, "p"], ["a good film", "a bad film"])
    torch.testing.assert_close(judge.scores([long_prompt], ["a good film"]), first[:1])
    assert judge.hits == 1 and judge.misses == 2
    assert all(isinstance(k, bytes) and len(k) == 16 for k in judge._memo.values)
    by_prompt = cached(FunctionJudge(lambda prompt, completion: float(len(prompt))))
    assert by_prompt.scores(["ab", "a"], ["c", "bc"]).tolist() == [2.0, 1.0]  # two keys


def test_vader_scores_a_long_word_of_punctuation_the_same_in_linear_time():
    from vader import polarity_scores

    judge = load_judge("vader", JudgeOptions(cache=False))
    texts = ["a good film " + ":)" * 400 + "!" * 7, "bad " + "?" * 3 + "." * 1000 + "??!"]
    want = torch.tensor([polarity_scores(t)["compound"] for t in texts])
    torch.testing.assert_close(judge.scores(["x", "x"], texts), want)
    start = time.monotonic()
    judge.scores(["x"], ["great " + "!" * 200_000])  # quadratic: 9 s; linear: milliseconds
    assert time.monotonic() - start < 3.0


def test_specs_that_name_no_judge_are_one_line_errors(tmp_path, folders):
    (tmp_path / "empty").mkdir()
    for spec, said in (
        (str(tmp_path / "nope"), "no such judge folder"),
        (str(tmp_path / "empty"), "no config.json"),
        ("python:nowhere.at_all:score", "cannot import"),
    ):
        with pytest.raises(ModelError, match=said):
            load_judge(spec)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    from nlhf.models.tiny import tiny_byte_lm

    folder = tmp_path_factory.mktemp("policy")
    model, tok = tiny_byte_lm("gpt2")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def train_one_step(name, policy, judge, out, *extra):
    from nlhf.cli import main

    return main([
        "train", name, "--policy", str(policy), "--judge", judge, "steps=1", "batch_size=2",
        "max_new_tokens=3", "progress=false", "tensorboard=false", f"out={out}", *extra,
    ])  # fmt: skip


@pytest.mark.parametrize("name", ["nash-md", "ppo"])
def test_trainers_take_a_hub_style_classifier_folder(folders, policy, tmp_path, name):
    judge = str(folders["bert-sentiment"])
    assert train_one_step(name, policy, judge, tmp_path / name, "judge_label=POSITIVE") == 0
    assert (tmp_path / name / "policy").is_dir()


def test_nash_md_takes_a_pairwise_lm_judge_and_ppo_refuses_it(folders, policy, tmp_path, capsys):
    judge = str(folders["pairwise-plain"])
    assert train_one_step("nash-md", policy, judge, tmp_path / "nash") == 0
    assert train_one_step("ppo", policy, judge, tmp_path / "ppo") == 2
    assert "PPO needs a scalar reward" in capsys.readouterr().err


def test_trainers_take_a_judge_server(folders, policy, tmp_path):
    from nlhf.judge.server import create_app
    from nlhf.web import running_server

    judge = load_judge(str(folders["llama-reward-chat"]))
    with running_server(create_app(judge, spec="reward")) as url:
        assert train_one_step("nash-md", policy, url, tmp_path / "nash") == 0
        assert train_one_step("ppo", policy, url, tmp_path / "ppo") == 0


def test_a_gpt2_pairwise_judge_answers_the_same_alone_and_in_a_batch(tmp_path):
    from nlhf.models.tiny import tiny_byte_lm

    model, tok = tiny_byte_lm("gpt2", max_positions=1024)
    model.save_pretrained(tmp_path / "gpt2")
    tok.save_pretrained(tmp_path / "gpt2")
    judge = load_judge(str(tmp_path / "gpt2"), JudgeOptions(cache=False))
    together = judge(PROMPTS, A, B)
    alone = torch.cat([judge([x], [y], [z]) for x, y, z in zip(PROMPTS, A, B, strict=True)])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=0)


def test_a_judge_token_is_not_written_into_run_records():
    from nlhf.config import to_dict
    from nlhf.train.nash_md import Config

    assert to_dict(Config(judge_token="s3cret"))["judge_token"] == "(hidden)"
    assert to_dict(Config())["judge_token"] == ""
