"""Every ``nlhf`` command (but ``nlhf label``) ends a user error with one line and status 2.

A bad data file, a wrong path, a judge folder that is not one, a checkpoint of another model,
an option out of range: ``main()`` returns 2 and the last line on stderr is
``nlhf <command>: error: <message>``, naming the file, row, field or option, with no traceback.
Most cases run ``nlhf.cli.main`` in this process, on tiny random-init models (nothing is
trained: each case stops at its error, before a step); a few run ``python -m nlhf.cli`` as a
real process, whose stderr must then be that one line and nothing else.

Each case stopped with a traceback (or, where marked "message only", with a less useful line)
before these errors were reported; the comment beside it says what was raised.
"""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import children
from nlhf.cli import main

PAIRS = [
    {"prompt": f"item {i}", "chosen": "a great film", "rejected": "an awful film"}
    for i in range(10)
]


def jsonl(rows) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Paths by name: a tiny policy, a tiny preference model, good and bad data files,
    folders that are not what a command expects, a regular file."""
    from nlhf.models.preference_model import PreferenceModel
    from nlhf.models.tiny import tiny_byte_lm
    from tiny_encoder import make_tiny_encoder

    root = tmp_path_factory.mktemp("cli-errors")
    model, tok = tiny_byte_lm("gpt2")
    model.save_pretrained(root / "policy")
    tok.save_pretrained(root / "policy")
    make_tiny_encoder(root / "encoder", "item good bad film a great awful".split())
    PreferenceModel.from_backbone(str(root / "encoder"), rank=2, max_length=16).save(root / "pm")

    good = jsonl(PAIRS)
    (root / "pairs.jsonl").write_text(good)
    (root / "one.jsonl").write_text(jsonl(PAIRS[:1]))
    (root / "notes.txt").write_text(good)
    packed = gzip.compress(good.encode())
    (root / "truncated.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    (root / "plain.jsonl.gz").write_text(good)  # named .gz, not gzip
    # JSON escapes that decode to lone surrogates: text that cannot be written as UTF-8
    (root / "surrogate_chosen.jsonl").write_text(
        good + '{"prompt": "x", "chosen": "\\ud800 yes", "rejected": "no"}\n'
    )
    (root / "surrogate_prompt.jsonl").write_text(
        '{"prompt": "\\udfff", "chosen": "yes", "rejected": "no"}\n' + good
    )
    (root / "prompts.jsonl").write_text(jsonl({"prompt": f"say {w}"} for w in "abcd"))
    (root / "prompts_surrogate.jsonl").write_text(
        '{"prompt": "say a"}\n{"prompt": "say \\ud83d"}\n'
    )
    (root / "one_demo.jsonl").write_text(jsonl([{"prompt": "a", "response": "b"}]))
    (root / "demos_surrogate.jsonl").write_text(
        '{"prompt": "a", "response": "b\\udc00"}\n{"prompt": "c", "response": "d"}\n'
    )
    (root / "bad_utf8.yaml").write_bytes(b"steps: 1\n# caf\xe9\n")
    (root / "a_file").write_text("not a folder\n")
    for folder in ("a_dir", "not_a_model", "not_a_judge"):
        (root / folder).mkdir()
    (root / "not_a_judge" / "config.json").write_text("{}")
    for name, meta in {
        "odd_judge": {"kind": "oracle"},
        "empty_judge": {"kind": "reward-model", "max_length": 16},
    }.items():
        (root / name).mkdir()
        (root / name / "nlhf_judge.json").write_text(json.dumps(meta))
    (root / "demo_run").mkdir()
    (root / "demo_run" / "config.yaml").write_text("quick: [true\n")
    return {p.name.split(".")[0]: str(p) for p in root.iterdir()}


JUDGE = ["--out", "{tmp}/out", "--backbone", "{not_a_model}", "--no-progress"]
OFFLINE = ["--policy", "{policy}", "--data", "{pairs}", "--out", "{tmp}/out", "max_steps=1"]
OFFLINE += ["batch_size=2", "--no-progress", "--no-tensorboard"]
ONLINE = ["--policy", "{policy}", "--prompts", "{prompts}", "--out", "{tmp}/out", "steps=1"]
ONLINE += ["batch_size=2", "max_new_tokens=2", "--no-progress", "--no-tensorboard"]
EVAL = ["--prompts", "{prompts}", "num_prompts=2", "samples_per_prompt=1", "max_new_tokens=2"]
EVAL += ["--no-progress", "--out", "{tmp}/out"]
NO_POLICIES = ["--policies", "{tmp}/nope1,{tmp}/nope2"]
TWO_POLICIES = ["--policies", "a={policy},b={policy}"]
TABULAR = ["--games", "cycle", "steps=10", "--no-progress", "--out", "{tmp}/out"]

# (command, arguments, what the error line says); later arguments override earlier ones
CASES = {
    # data files (nlhf train reward-model reads the pairs before it loads the backbone)
    "data-is-a-directory": (  # FileNotFoundError "no such data file" (no .filename)
        "train reward-model",
        ["--data", "{a_dir}", *JUDGE],
        ["a directory, not a data file"],
    ),
    "data-does-not-exist": (  # FileNotFoundError without .filename
        "train reward-model",
        ["--data", "{tmp}/nope.jsonl", *JUDGE],
        ["data: '", "neither"],
    ),
    "data-keyword-typo": (  # FileNotFoundError without .filename
        "train reward-model",
        ["--data", "hhh", *JUDGE],
        ["data: 'hhh' is neither a file"],
    ),
    "data-unknown-suffix": (  # ValueError from the loader
        "train reward-model",
        ["--data", "{notes}", *JUDGE],
        ["notes.txt: unknown data format"],
    ),
    "data-truncated-gzip": (  # EOFError
        "train reward-model",
        ["--data", "{truncated}", *JUDGE],
        ["truncated.jsonl.gz: not a readable gzip file"],
    ),
    "data-gz-not-gzip": (  # gzip.BadGzipFile (an OSError without .filename)
        "train reward-model",
        ["--data", "{plain}", *JUDGE],
        ["plain.jsonl.gz: not a readable gzip file"],
    ),
    "data-lone-surrogate-in-a-response": (  # loaded; the backbone's load raised (a tokenizer
        "train reward-model",  # would have raised on the text)
        ["--data", "{surrogate_chosen}", *JUDGE],
        ["surrogate_chosen.jsonl, line 11, field 'chosen': not valid Unicode text"],
    ),
    "data-lone-surrogate-in-a-prompt": (  # UnicodeEncodeError in the split's prompt hash
        "train reward-model",
        ["--data", "{surrogate_prompt}", *JUDGE],
        ["surrogate_prompt.jsonl, line 1, field 'prompt': not valid Unicode text"],
    ),
    "data-too-few-pairs-to-split": (  # ValueError from PreferenceDataset.split
        "train reward-model",
        ["--data", "{one}", *JUDGE],
        ["one.jsonl: 1 pair: too few"],
    ),
    "imdb-more-pairs-than-there-are": (  # ValueError from review_pairs
        "train reward-model",
        ["--data", "imdb", "max_pairs=10000000", *JUDGE],
        ["data imdb (max_pairs=10000000"],
    ),
    "backbone-is-not-a-model": (  # ValueError from transformers' tokenizer loading
        "train preference-model",
        ["--data", "{pairs}", *JUDGE],
        ["not_a_model: cannot load an encoder backbone: not a model folder"],
    ),
    # offline trainers
    "sft-one-demonstration": (  # ValueError from split_indices
        "train sft",
        [*OFFLINE, "--data", "{one_demo}"],
        ["1 demonstration: too few"],
    ),
    "sft-lone-surrogate-in-a-response": (  # loaded; the tokenizer raised while training
        "train sft",
        [*OFFLINE, "--data", "{demos_surrogate}"],
        ["demos_surrogate.jsonl, line 1, field 'response': not valid Unicode text"],
    ),
    "dpo-fsdp-in-one-process": (  # ValueError from the trainer
        "train dpo",
        [*OFFLINE, "fsdp=true"],
        ["fsdp=true shards the model"],
    ),
    "ipo-negative-learning-rate": (  # ValueError from torch's AdamW, after loading
        "train ipo",
        [*OFFLINE, "lr=-1"],
        ["lr must be a finite number > 0"],
    ),
    "config-file-not-utf8": (  # UnicodeDecodeError
        "train dpo",
        [*OFFLINE, "--config", "{bad_utf8}"],
        ["bad_utf8.yaml: not valid UTF-8"],
    ),
    # online trainers: policy, judge, prompts
    "policy-is-not-a-model": (  # ValueError from transformers
        "train nash-md",
        [*ONLINE, "--policy", "{not_a_model}"],
        ["not_a_model: cannot load a causal LM: not a model folder"],
    ),
    "judge-does-not-exist": (  # FileNotFoundError without .filename
        "train nash-ema",
        [*ONLINE, "--judge", "{tmp}/nope"],
        ["nope: no such judge folder"],
    ),
    "judge-folder-is-not-a-judge": (  # FileNotFoundError without .filename
        "train nash-mp",
        [*ONLINE, "--judge", "{not_a_judge}"],
        ["not_a_judge: not a judge: its config.json names no architecture"],
    ),
    "judge-of-unknown-kind": (  # ValueError
        "train online-dpo",
        [*ONLINE, "--judge", "{odd_judge}"],
        ["unknown judge kind 'oracle'"],
    ),
    "judge-without-weights": (  # ValueError from transformers
        "train nash-md",
        [*ONLINE, "--judge", "{empty_judge}"],
        ["empty_judge: cannot load a reward model"],
    ),
    "ppo-with-a-preference-model": (  # TypeError
        "train ppo",
        [*ONLINE, "--judge", "{pm}"],
        ["PPO needs a scalar reward"],
    ),
    "step-rule-the-trainer-cannot-take": (  # one refusal for every trainer (Algorithm)
        "train ppo",
        [*ONLINE, "--judge", "vader", "step_rule=optimistic"],
        ["step_rule=optimistic: PPO takes plain only"],
    ),
    "prompts-neither-a-set-nor-a-file": (  # FileNotFoundError without .filename
        "train nash-md",
        [*ONLINE, "--prompts", "nope"],
        ["prompts: 'nope' is neither a file"],
    ),
    "prompts-lone-surrogate": (  # TypeError from the tokenizer
        "train nash-md",
        [*ONLINE, "--prompts", "{prompts_surrogate}"],
        ["prompts_surrogate.jsonl, line 2, field 'prompt': not valid Unicode text"],
    ),
    # the tournament
    "eval-prompts-unknown-suffix": (  # ValueError from the loader
        "eval",
        [*EVAL, *NO_POLICIES, "--prompts", "{notes}"],
        ["unknown data format '.txt'"],
    ),
    "eval-policy-does-not-exist": (  # ValueError
        "eval",
        [*EVAL, "--policies", "{policy},{tmp}/nope"],
        ["policies[1] '", "does not exist"],
    ),
    "eval-reference-unknown": (  # ValueError
        "eval",
        [*EVAL, "--policies", "{policy},reference"],
        ["policies[1] is 'reference'"],
    ),
    "eval-policy-is-not-a-model": (  # ValueError from transformers
        "eval",
        [*EVAL, "--policies", "bad={not_a_model},b={policy}"],
        ["not_a_model: cannot load a causal LM: not a model folder"],
    ),
    "eval-judge-does-not-exist": (  # FileNotFoundError without .filename
        "eval",
        [*EVAL, *TWO_POLICIES, "--judges", "{tmp}/nope"],
        ["no such judge folder"],
    ),
    "eval-out-is-a-file": (  # message only: "File exists: …" after sampling and judging
        "eval",
        [*EVAL, *TWO_POLICIES, "--out", "{a_file}"],
        ["out: ", "is a file, not a folder"],
    ),
    # the tabular lab
    "tabular-ema-out-of-range": (  # ValueError from the dynamics
        "tabular",
        [*TABULAR, "ema=2"],
        ["ema must be in (0, 1]"],
    ),
    "tabular-negative-step-size": (  # ValueError from the dynamics
        "tabular",
        [*TABULAR, "--schedule", "constant", "--eta", "-1"],
        ["eta must be a finite number > 0"],
    ),
    "tabular-infinite-tau": (  # ValueError from the solver
        "tabular",
        [*TABULAR, "tau=inf"],
        ["tau: 'inf' is not a finite number"],
    ),
    "tabular-out-is-a-file": (  # message only: "File exists: …" after every game ran
        "tabular",
        [*TABULAR, "--out", "{a_file}"],
        ["is a file, not a folder"],
    ),
    # the demo: a resumed run whose saved options are not YAML
    "demo-saved-config-malformed": (  # yaml.YAMLError
        "demo",
        ["--out", "{demo_run}"],
        ["config.yaml: not valid YAML"],
    ),
}


def argv(command: str, args: list[str], files: dict[str, str], tmp: Path) -> list[str]:
    return [*command.split(), *(arg.format(tmp=tmp, **files) for arg in args)]


def check_line(err: str, command: str, says: list[str]) -> str:
    """The error line: the last on stderr, the only one starting with "nlhf"; no traceback."""
    assert "Traceback" not in err, err
    lines = err.rstrip("\n").splitlines()
    ours = [line for line in lines if line.startswith("nlhf")]
    assert len(ours) == 1 and lines[-1] == ours[0], err
    assert ours[0].startswith(f"nlhf {command}: error: "), ours[0]
    for text in says:
        assert text in ours[0], ours[0]
    return ours[0]


@pytest.fixture(autouse=True)
def no_debug(monkeypatch):
    monkeypatch.delenv("NLHF_DEBUG", raising=False)


@pytest.mark.parametrize("case", CASES)
def test_a_user_error_ends_the_command_with_one_line(case, files, tmp_path, capsys):
    command, args, says = CASES[case]
    assert main(argv(command, args, files, tmp_path)) == 2
    check_line(capsys.readouterr().err, command, says)


@pytest.mark.parametrize("damage", ["another-model", "unreadable"])
def test_a_checkpoint_that_does_not_fit_is_a_user_error(damage, files, tmp_path, capsys):
    """A checkpoint in --out written for other weights (old: KeyError while copying them),
    or not a checkpoint file at all (old: RuntimeError from torch.load)."""
    from nlhf.train.checkpoint import Checkpointer

    checkpoints = Checkpointer(tmp_path / "out" / "checkpoints")
    saved = checkpoints.save(1, {"trainable": {"not.a.parameter": torch.zeros(2)}})
    if damage == "unreadable":
        (saved / "state.pt").write_bytes(b"not a checkpoint")
    assert main(argv("train nash-md", [*ONLINE, "steps=2"], files, tmp_path)) == 2
    line = check_line(capsys.readouterr().err, "train nash-md", ["--no-resume"])
    expected = "not a readable checkpoint" if damage == "unreadable" else "for another model"
    assert expected in line and "checkpoints" in line


# Real processes: stderr is the error line alone.
PROCESSES = {
    "tabular": ("tabular", [*TABULAR, "ema=2"], ["ema must be in"]),  # ValueError
    "eval": ("eval", ["--policies", "a,b", "--prompts", "nope"], ["prompts: 'nope'"]),
    "assets": ("assets", ["--config", "{bad_utf8}"], ["not valid UTF-8"]),  # UnicodeDecodeError
    "train": (  # EOFError
        "train reward-model",
        ["--data", "{truncated}", *JUDGE],
        ["not a readable gzip file"],
    ),
    "demo": ("demo", ["--out", "{demo_run}"], ["not valid YAML"]),  # yaml.YAMLError
}


@pytest.mark.parametrize("case", PROCESSES)
def test_a_real_process_prints_only_the_error_line(case, files, tmp_path):
    command, args, says = PROCESSES[case]
    done = subprocess.run(
        [sys.executable, "-m", "nlhf.cli", *argv(command, args, files, tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in children.env(tmp_path).items() if k != "NLHF_DEBUG"},
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    check_line(done.stderr, command, says)


def test_debug_shows_the_traceback_of_a_user_error(files, tmp_path):
    """``--debug`` re-raises: the library's exception, a DataError naming file and line."""
    from nlhf.data import DataError

    args = ["--debug", "--data", "{surrogate_prompt}", *JUDGE]
    with pytest.raises(DataError, match=r"surrogate_prompt\.jsonl, line 1, field 'prompt'"):
        main(argv("train reward-model", args, files, tmp_path))


# The library: callers get exceptions, the command line's user errors among them.
def test_the_data_loader_raises_errors_that_name_the_file(files):
    from nlhf.data import DataError, load_pairs

    with pytest.raises(IsADirectoryError) as info:  # old: FileNotFoundError
        load_pairs(files["a_dir"])
    assert info.value.filename == files["a_dir"]
    with pytest.raises(FileNotFoundError) as info:  # old: without .filename
        load_pairs(files["a_dir"] + "/nope.jsonl")
    assert info.value.filename == files["a_dir"] + "/nope.jsonl"
    for name in ("notes", "truncated", "plain"):  # old: ValueError, EOFError, BadGzipFile
        with pytest.raises(DataError) as info:
            load_pairs(files[name])
        assert info.value.source == files[name] and info.value.kind == "malformed"
    with pytest.raises(DataError) as info:  # old: loaded
        load_pairs(files["surrogate_chosen"])
    err = info.value
    assert (err.kind, err.location, err.field) == ("bad_value", "line 11", "chosen")
