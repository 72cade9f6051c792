"""Tasks sampled on the spot from tiny random models (GPT-2 config, in-process tokenizer)."""

import dataclasses
import json

import pytest

from nlhf.label import add_cli
from nlhf.label.generate import load_model, tasks_from_policies
from nlhf.label.store import LabelStore

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

pytestmark = pytest.mark.slow  # ~10 s with the torch/transformers imports and two tiny models

CORPUS = [
    "Human: say something nice\n\nAssistant: what a lovely day it is",
    "the quick brown fox jumps over the lazy dog",
    "good films have good stories and good actors",
] * 20


def tiny_model_folder(path, seed):
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token=None))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<eos>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=len(fast), n_positions=256, n_embd=32, n_layer=2, n_head=2,
        eos_token_id=fast.eos_token_id, bos_token_id=fast.eos_token_id,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return tiny_model_folder(root / "policy", 0), tiny_model_folder(root / "opponent", 1)


def test_two_samples_of_one_policy(models):
    policy = load_model(str(models[0]))
    prompts = ["say something nice", [{"role": "user", "content": "tell me about films"}]]
    tasks, dropped = tasks_from_policies(policy, prompts, max_new_tokens=12, seed=3)
    assert len(tasks) + dropped == 2 and len(tasks) >= 1
    for task in tasks:
        assert task.response_a != task.response_b
        assert task.info["models"] == {"a": "policy", "b": "policy"}
        assert task.info["sampling"]["max_new_tokens"] == 12
    again, _ = tasks_from_policies(policy, prompts, max_new_tokens=12, seed=3)
    assert [t.key for t in again] == [t.key for t in tasks]  # seeded: reproducible


def test_a_tasks_text_does_not_depend_on_its_batch(models):
    """Each prompt's responses come from generators seeded by (seed, response, prompt row):
    alone, in a batch of two or of four (other prompt lengths, other padding), the same text."""
    policy, opponent = load_model(str(models[0])), load_model(str(models[1]), name="ref")
    prompts = ["good films", "the quick brown fox jumps", "say", "a lovely day it is"]
    for against in (None, opponent):
        runs = [
            tasks_from_policies(
                policy, prompts, opponent=against, max_new_tokens=10, seed=5, batch_size=size
            )
            for size in (1, 2, 4)
        ]
        texts = [[(t.prompt, t.response_a, t.response_b) for t in tasks] for tasks, _ in runs]
        assert texts[0] and texts[0] == texts[1] == texts[2]


def test_policy_against_opponent_and_dropping_identical(models):
    policy, opponent = load_model(str(models[0])), load_model(str(models[1]), name="ref")
    tasks, dropped = tasks_from_policies(
        policy, ["good films"] * 3, opponent=opponent, max_new_tokens=8, batch_size=2
    )
    assert len(tasks) + dropped == 3
    assert all(t.info["models"] == {"a": "policy", "b": "ref"} for t in tasks)
    same = dataclasses.replace(policy, name="same")
    greedy, dropped = tasks_from_policies(
        same, ["good films"], opponent=same, max_new_tokens=8, temperature=1e-4
    )
    assert greedy == [] and dropped == 1  # the same model, near-greedy: identical answers


def test_add_command_generates_tasks(models, tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ["a", "b", "c"]))
    db = str(tmp_path / "l.sqlite")
    config = add_cli.Config(
        db=db, policy=str(models[0]), opponent=str(models[1]), prompts=str(prompts), n=2,
        max_new_tokens=6,
    )  # fmt: skip
    assert add_cli.run(config) == 0
    out = capsys.readouterr().out
    assert "2 prompts sampled" in out
    tasks = LabelStore(db).tasks()
    assert 1 <= len(tasks) <= 2
    assert all(t.source == "policy vs opponent" for t in tasks.values())


def test_add_command_reports_a_missing_model(tmp_path, capsys):
    from nlhf import cli

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "a"}\n')
    args = ["--db", str(tmp_path / "l.sqlite"), "--policy", str(tmp_path / "nope")]
    assert cli.main(["label", "add", *args, "--prompts", str(prompts)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nlhf label add: error: ") and "cannot load" in err
    assert err.count("\n") == 1
