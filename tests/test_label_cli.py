"""The ``nlhf label`` commands: run() of add / export / tokens, configs, and the CLI registry."""

import argparse
import json

import pytest

from nlhf import cli
from nlhf.config import add_config_arguments
from nlhf.data import load_pairs
from nlhf.label import add_cli, export_cli, keys_cli, serve_cli, tokens_cli
from nlhf.label.store import LabelStore

MODULES = [add_cli, export_cli, keys_cli, serve_cli, tokens_cli]


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
    assert cli.main(["label", "add", "--db", db, "--input", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nlhf label add: error: ") and err.count("\n") == 1
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
    LabelStore(db).close()
    assert tokens_cli.run(tokens_cli.Config(db=db, create="alice")) == 0
    out = capsys.readouterr().out
    token = out.split("login?token=")[1].strip()
    assert LabelStore(db).labeler_by_token(token).name == "alice"
    assert cli.main(["label", "tokens", "--db", db, "--create", "alice"]) == 2
    assert "already has a token" in capsys.readouterr().err
    assert tokens_cli.run(tokens_cli.Config(db=db)) == 0
    assert "alice\tlabeler\ttoken" in capsys.readouterr().out
    assert tokens_cli.run(tokens_cli.Config(db=db, revoke="alice")) == 0
    assert LabelStore(db).labeler_by_token(token) is None
    assert cli.main(["label", "tokens", "--db", db, "--revoke", "nobody"]) == 2
    assert "no labeler called 'nobody'" in capsys.readouterr().err


def test_serve_config_security_rules():
    assert not serve_cli.Config().require_tokens
    assert serve_cli.Config(host="0.0.0.0").require_tokens
    assert serve_cli.Config(host="::1").require_tokens is False
    assert serve_cli.Config(auth="token").require_tokens
    with pytest.raises(ValueError, match="tokens are required"):
        serve_cli.Config(host="0.0.0.0", auth="none")
    with pytest.raises(ValueError, match="port"):
        serve_cli.Config(port=70000)


def test_registry_entry_drives_the_commands(tmp_path, capsys):
    db = str(tmp_path / "l.sqlite")
    tasks = write_tasks(tmp_path / "t.jsonl", 2)
    assert cli.main(["label", "add", "--db", db, "--input", str(tasks)]) == 0
    label_all(db, "tie")
    out = tmp_path / "p.jsonl"
    assert cli.main(["label", "export", "--db", db, "--out", str(out), "ties=half"]) == 0
    assert len(load_pairs(out)) == 4
    assert cli.main(["label", "tokens", "--db", db, "--create", "bob", "--admin"]) == 0
    assert "admin token for bob" in capsys.readouterr().out
    assert cli.main(["label", "serve", "--host", "0.0.0.0", "--auth", "none"]) == 2
    assert "--auth none is refused" in capsys.readouterr().err


def one_error_line(capsys):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("command", ["export", "tokens", "serve", "keys"])
def test_commands_other_than_add_refuse_a_missing_database(tmp_path, capsys, command):
    typo = tmp_path / "lables.sqlite"
    assert cli.main(["label", command, "--db", str(typo)]) == 2
    err = one_error_line(capsys)
    assert err.startswith(f"nlhf label {command}: error: {typo}: no labeling database there")
    assert not typo.exists()


def test_bad_databases_and_ports_are_one_line_errors(tmp_path, capsys):
    import socket

    text = tmp_path / "notes.sqlite"
    text.write_text("not a database\n" * 100)
    tasks = write_tasks(tmp_path / "t.jsonl", 2)
    for db, said in (
        (text, "file is not a database"),
        (tmp_path, "a directory, not a labeling database"),
        (tmp_path / "missing" / "dir" / "x.sqlite", "unable to open database file"),
    ):
        assert cli.main(["label", "add", "--db", str(db), "--input", str(tasks)]) == 2
        err = one_error_line(capsys)
        assert err.startswith(f"nlhf label add: error: {db}") and said in err, err
    db = str(tmp_path / "l.sqlite")
    assert cli.main(["label", "add", "--db", db, "--input", str(tasks)]) == 0
    assert "2 tasks added" in capsys.readouterr().out
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        assert cli.main(["label", "serve", "--db", db, "--port", str(port)]) == 2
    finally:
        busy.close()
    err = one_error_line(capsys)
    assert f"--port {port}" in err and "in use" in err.lower()


def test_task_texts_that_are_not_unicode_name_their_row(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    path.write_text('{"prompt": "p", "response_a": "fine", "response_b": "lone \\ud800"}\n')
    db = str(tmp_path / "l.sqlite")
    assert cli.main(["label", "add", "--db", db, "--input", str(path)]) == 2
    err = one_error_line(capsys)
    assert "s.jsonl, line 1, field 'response_b'" in err and "surrogate" in err


def test_one_task_is_one_task(tmp_path, capsys):
    db = str(tmp_path / "l.sqlite")
    assert (
        cli.main(["label", "add", "--db", db, "--input", str(write_tasks(tmp_path / "t.jsonl", 1))])
        == 0
    )
    assert "1 task added" in capsys.readouterr().out


def test_keys_rotate_signs_everyone_out(tmp_path, capsys):
    db = str(tmp_path / "l.sqlite")
    store = LabelStore(db)
    from nlhf.label.keys import KeyFile
    from nlhf.label.security import Guard, digest

    guard = Guard(store, KeyFile(tmp_path / "l.sqlite.key"))
    session, _ = guard.new_session(store.labeler_for_name("ann"), "name")
    old = (tmp_path / "l.sqlite.key").read_text()
    assert cli.main(["label", "keys", "--db", db, "--rotate"]) == 0
    assert "1 sessions ended" in capsys.readouterr().out
    assert (tmp_path / "l.sqlite.key").read_text() != old
    assert store.session(digest(session.nonce)).ended
    store.close()


def test_a_key_file_that_is_a_folder_or_in_a_missing_folder_is_refused(tmp_path, capsys):
    db = str(tmp_path / "l.sqlite")
    LabelStore(db).close()
    assert cli.main(["label", "keys", "--db", db, "--key-file", str(tmp_path)]) == 2
    assert f"{tmp_path}: the session key file is a folder" in one_error_line(capsys)
    key = tmp_path / "missing" / "deeper" / "l.key"
    assert cli.main(["label", "keys", "--db", db, "--key-file", str(key), "--rotate"]) == 2
    assert f"no folder {key.parent}" in one_error_line(capsys)
    assert not (tmp_path / "missing").exists()


def test_export_refuses_a_folder_or_a_missing_folder_as_out(tmp_path, capsys):
    db = str(tmp_path / "l.sqlite")
    LabelStore(db).close()
    assert cli.main(["label", "export", "--db", db, "--out", str(tmp_path)]) == 2
    assert f"out: {tmp_path} is a folder" in one_error_line(capsys)
    out = tmp_path / "missing" / "p.jsonl"
    assert cli.main(["label", "export", "--db", db, "--out", str(out)]) == 2
    assert f"out: no folder {out.parent}" in one_error_line(capsys)
    assert not out.parent.exists()
