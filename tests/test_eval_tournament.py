"""The tournament end to end on tiny GPT-2 policies: sampling, judging, KL, report files."""

import json
import shutil

import numpy as np
import pytest
import torch

from eval_tiny import build_folders
from nlhf.eval import Sampling, run_tournament
from nlhf.eval.entrants import parse_entrants
from nlhf.eval.judging import judge_tournament
from nlhf.eval.rollouts import sample_entrants
from nlhf.models.judges import FunctionJudge

PROMPTS = ["hello", "the movie was", "I think", "a b c", "zzz"]


def count_a(prompt, text):
    return text.count("a")


class PairwiseCountA:
    """A pairwise judge (not a ScoreJudge) that must agree with FunctionJudge(count_a)."""

    name = "pairwise"

    def __call__(self, prompts, a, b):
        rows = zip(prompts, a, b, strict=True)
        d = torch.tensor([count_a(p, x) - count_a(p, y) for p, x, y in rows])
        return torch.sigmoid(d.float())


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return build_folders(tmp_path_factory.mktemp("policies"))


@pytest.fixture(scope="module")
def result(folders, tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("tournament")
    judges = {"count_a": FunctionJudge(count_a), "pairwise": PairwiseCountA()}
    res = run_tournament(
        ["reference", f"lora={folders['ad1']}", f"aaa={folders['aaa']}"],
        PROMPTS,
        judges,
        sampling=Sampling(samples_per_prompt=3, max_new_tokens=10, batch_size=7),
        progress=False,
        out=out,
    )
    return res, out


def test_the_policy_the_judge_likes_wins(result):
    res, _ = result
    rates = res.win_rates["count_a"]
    assert res.names == ["reference", "lora", "aaa"]
    assert rates.mean[2, 0] > 0.95 and rates.mean[2, 1] > 0.95  # 'aaa…' beats random bytes
    assert np.allclose(rates.mean + rates.mean.T, 1.0)
    assert rates.low[2, 0] > 0.5  # significant over 5 prompts
    aaa = res.policies[2]
    assert aaa.scores["count_a"].mean > 8  # nearly every one of 10 tokens is 'a'
    assert "pairwise" not in aaa.scores  # a pairwise judge has no scores


def test_kl_to_the_reference(result):
    res, _ = result
    ref, lora, aaa = res.policies
    assert ref.kl.mean == 0.0
    assert aaa.kl.mean > 5.0  # far from the random reference
    assert lora.kl is not None and np.isfinite(lora.kl.mean)
    assert aaa.length.mean == 10.0  # never emits EOS
    # the exact KL of every completion is ≥ 0; for a policy that always writes the same
    # completion the sampled estimate is exact too, for a random one it is not
    for c in res.completions[1:]:
        assert (c.kl >= -1e-6).all()
    assert np.allclose(res.completions[2].kl, res.completions[2].kl_sampled, rtol=1e-4)
    assert not np.allclose(res.completions[1].kl, res.completions[1].kl_sampled)
    assert res.as_dict()["policies"][2]["kl_sampled"]["mean"] == aaa.kl_sampled.mean


def test_score_shortcut_and_pairwise_judge_agree(result):
    res, _ = result
    shortcut, pairwise = res.verdicts
    assert shortcut.scores is not None and pairwise.scores is None
    for pair in shortcut.prefs:
        assert shortcut.prefs[pair].shape == (len(PROMPTS), 9)  # all 3 × 3 sample pairs
        assert np.allclose(shortcut.prefs[pair], pairwise.prefs[pair], atol=1e-6)
    d = res.disagreements[("count_a", "pairwise")]
    assert d.overall.mean == 0.0 and np.allclose(d.difference, 0.0, atol=1e-6)
    aligned = judge_tournament(PairwiseCountA(), "p", PROMPTS, res.completions, "aligned")
    assert aligned.prefs[(0, 1)].shape == (len(PROMPTS), 3)


def test_report_files(result):
    import matplotlib.image

    res, out = result
    data = json.loads((out / "tournament.json").read_text())
    assert [p["name"] for p in data["policies"]] == ["reference", "lora", "aaa"]
    assert data["judges"]["count_a"]["win_rate"][0][0] == 0.5
    assert data["judges"]["pairwise"]["kind"] == "pairwise"
    assert data["disagreements"][0]["judges"] == ["count_a", "pairwise"]
    md = (out / "tournament.md").read_text()
    assert "## Win rates — judge `count_a`" in md and "Where `count_a` and `pairwise`" in md
    assert f"{res.win_rates['count_a'].mean[2, 0]:.2f} [" in md
    image = matplotlib.image.imread(out / "heatmap.png")
    assert image.ndim == 3 and image.shape[0] > 200


def test_a_policy_samples_the_same_texts_from_another_folder(folders, tmp_path):
    """The seeds come from the entrant's name in the run, not from the path it is stored at
    (two demo runs with dated output folders once sampled different tournaments)."""
    moved = tmp_path / "elsewhere" / "2026-01-01" / "policy"
    shutil.copytree(folders["ad2"], moved)
    settings = Sampling(samples_per_prompt=2, max_new_tokens=8)
    texts = []
    for path in (folders["ad2"], moved):
        entrants, ref = parse_entrants([f"ad1={folders['ad1']}", f"ad2={path}"])
        texts.append(sample_entrants(entrants, ref, PROMPTS, settings, False)[1].texts)
    assert texts[0] == texts[1]


def test_without_the_kl_the_same_texts_are_sampled(folders):
    """kl=False leaves the reference out of every decode: each entrant's texts (reference,
    adapter on it, full model) are those of the run with the KL, and no KL is reported."""
    entrants, ref = parse_entrants(["reference", f"lora={folders['ad1']}", f"aaa={folders['aaa']}"])
    settings = Sampling(samples_per_prompt=2, max_new_tokens=8)
    with_kl = sample_entrants(entrants, ref, PROMPTS, settings, False)
    without = sample_entrants(entrants, ref, PROMPTS, settings, False, kl=False)
    assert [c.texts for c in without] == [c.texts for c in with_kl]
    assert all(c.kl is None and c.kl_sampled is None for c in without)
    assert with_kl[1].kl is not None and (with_kl[1].kl > 0).any()


def test_samples_depend_only_on_seed_policy_and_row(folders):
    """Multi-adapter loading and batching do not change what an adapter samples."""
    settings = dict(samples_per_prompt=2, max_new_tokens=8)
    together, ref = parse_entrants([str(folders["ad1"]), str(folders["ad2"])])
    alone, _ = parse_entrants(["reference", str(folders["ad2"])])
    a = sample_entrants(together, ref, PROMPTS, Sampling(batch_size=3, **settings), False)
    b = sample_entrants(alone, ref, PROMPTS, Sampling(batch_size=10, **settings), False)
    assert a[1].texts == b[1].texts
    assert np.allclose(a[1].kl, b[1].kl, atol=1e-4)
    assert a[0].texts != a[1].texts  # different adapters, different samples
