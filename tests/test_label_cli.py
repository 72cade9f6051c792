"""The ``nlhf label`` commands: run() of add / export / tokens, configs, and the CLI registry."""

import argparse
import json

import pytest

from nlhf import cli
from nlhf.config import add_config_arguments
from nlhf.data import load_pairs
from nlhf.label import add_cli, export_cli, serve_cli, tokens_cli
from nlhf.label.store import LabelStore

MODULES = [add_cli, export_cli, serve_cli, tokens_cli]

# The entry proposed for nlhf.cli.COMMANDS (tested here by patching the registry).
LABEL_GROUP = cli.Group(
    "Human feedback: a pairwise labeling web app and its preference-dataset export.",
    {
        "serve": cli.Command("nlhf.label.serve_cli", "Run the labeling web app."),
        "add": cli.Command("nlhf.label.add_cli", "Add comparison tasks (file or policies)."),
        "export": cli.Command("nlhf.label.export_cli", "Export labels as preference pairs."),
        "tokens": cli.Command("nlhf.label.tokens_cli", "List, create and revoke tokens."),
    },
)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_field_has_help(module):
    add_config_arguments(argparse.ArgumentParser(), module.Config)  # raises without help


def write_tasks(path, n=3):
    rows = [{"prompt": f"p{i}", "response_a": f"a{i}", "response_b": f"b{i}"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def label_all(db, answer="left", k=1):
    store = LabelStore(db)
    ann = store.labeler_for_name("ann")
    while (job := store.next_assignment(ann.id, k=k)) is not None:
        store.submit(ann.id, job.id, answer, k=k)
    store.close()


def test_add_then_export(tmp_path, capsys):
    db = str(tmp_path / "l.sqlite")
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    assert add_cli.run(add_cli.Config(db=db, input=str(tasks))) == 0
    assert "3 tasks added, 0 already present" in capsys.readouterr().out
    assert add_cli.run(add_cli.Config(db=db, input=str(tasks))) == 0
    assert "0 tasks added, 3 already present" in capsys.readouterr().out
    label_all(db)
    out = tmp_path / "prefs.jsonl"
    assert export_cli.run(export_cli.Config(db=db, out=str(out))) == 0
    pairs = load_pairs(out)
    assert len(pairs) == 3 and {p.source for p in pairs} == {"tasks.jsonl"}


def test_add_reports_bad_rows(tmp_path, capsys):
    db = str(tmp_path / "l.sqlite")
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "p", "response_a": "a", "response_b": "b"}\n{"prompt": "p"}\n')
    assert add_cli.run(add_cli.Config(db=db, input=str(path))) == 1
    err = capsys.readouterr().err
    assert "bad.jsonl, line 2, field 'response_a'" in err
    assert add_cli.run(add_cli.Config(db=db, input=str(path), skip_bad_rows=True)) == 0
    assert "1 row skipped" in capsys.readouterr().out


def test_add_custom_fields(tmp_path):
    db = str(tmp_path / "l.sqlite")
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"q": "why", "l": "x", "r": "y", "source": "mine"}) + "\n")
    config = add_cli.Config(db=db, input=str(path), prompt_field="q", a_field="l", b_field="r")
    assert add_cli.run(config) == 0
    (task,) = LabelStore(db).tasks().values()
    assert (task.prompt, task.response_a, task.source) == ("why", "x", "mine")


def test_add_config_needs_one_source():
    with pytest.raises(ValueError, match="either --input"):
        add_cli.Config()
    with pytest.raises(ValueError, match="either --input"):
        add_cli.Config(input="x.jsonl", policy="m", prompts="p.jsonl")
    with pytest.raises(ValueError, match="both --policy and --prompts"):
        add_cli.Config(policy="m")


def test_tokens_command(tmp_path, capsys):
    db = str(tmp_path / "l.sqlite")
    assert tokens_cli.run(tokens_cli.Config(db=db, create="alice")) == 0
    out = capsys.readouterr().out
    token = out.split("login?token=")[1].strip()
    assert LabelStore(db).labeler_by_token(token).name == "alice"
    assert tokens_cli.run(tokens_cli.Config(db=db, create="alice")) == 1
    assert "already has a token" in capsys.readouterr().err
    assert tokens_cli.run(tokens_cli.Config(db=db)) == 0
    assert "alice\tlabeler\ttoken" in capsys.readouterr().out
    assert tokens_cli.run(tokens_cli.Config(db=db, revoke="alice")) == 0
    assert LabelStore(db).labeler_by_token(token) is None
    assert tokens_cli.run(tokens_cli.Config(db=db, revoke="nobody")) == 1


def test_serve_config_security_rules():
    assert not serve_cli.Config().require_tokens
    assert serve_cli.Config(host="0.0.0.0").require_tokens
    assert serve_cli.Config(host="::1").require_tokens is False
    assert serve_cli.Config(auth="token").require_tokens
    with pytest.raises(ValueError, match="tokens are required"):
        serve_cli.Config(host="0.0.0.0", auth="none")
    with pytest.raises(ValueError, match="port"):
        serve_cli.Config(port=70000)


def test_registry_entry_drives_the_commands(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(cli.COMMANDS, "label", LABEL_GROUP)
    db = str(tmp_path / "l.sqlite")
    tasks = write_tasks(tmp_path / "t.jsonl", 2)
    assert cli.main(["label", "add", "--db", db, "--input", str(tasks)]) == 0
    label_all(db, "tie")
    out = tmp_path / "p.jsonl"
    assert cli.main(["label", "export", "--db", db, "--out", str(out), "ties=half"]) == 0
    assert len(load_pairs(out)) == 4
    assert cli.main(["label", "tokens", "--db", db, "--create", "bob", "--admin"]) == 0
    assert "admin token for bob" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["label", "serve", "--host", "0.0.0.0", "--auth", "none"])
