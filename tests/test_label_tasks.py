"""Reading comparison tasks from files: fields, chat prompts, errors that name file/line/field."""

import json

import pytest

from nlhf.data import DataError
from nlhf.label.tasks import TaskColumns, TaskInput, read_tasks


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_reads_default_fields_and_chat_prompts(tmp_path):
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {"prompt": "Hi", "response_a": "Hello", "response_b": "Go away", "info": {"m": 1}},
            {"prompt": [{"role": "user", "content": "Q?"}], "response_a": "x", "response_b": "y"},
        ],
    )
    tasks, skipped = read_tasks(path)
    assert not skipped
    assert tasks[0].response_a == "Hello" and tasks[0].info == {"m": 1}
    assert tasks[1].prompt[0].role == "user"
    assert json.loads(tasks[1].prompt_json) == [{"role": "user", "content": "Q?"}]


def test_custom_columns_and_csv(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("question,left,right\nWhy?,Because.,No idea.\n")
    tasks, _ = read_tasks(
        path, TaskColumns(prompt="question", response_a="left", response_b="right")
    )
    assert (tasks[0].prompt, tasks[0].response_a, tasks[0].response_b) == (
        "Why?",
        "Because.",
        "No idea.",
    )


@pytest.mark.parametrize(
    ("row", "field", "kind"),
    [
        ({"prompt": "p", "response_a": "a"}, "response_b", "missing_field"),
        ({"prompt": "p", "response_a": " ", "response_b": "b"}, "response_a", "empty_text"),
        ({"prompt": "p", "response_a": "same", "response_b": "same "}, "response_b", "identical"),
        ({"prompt": "", "response_a": "a", "response_b": "b"}, "prompt", "empty_text"),
        ({"prompt": "p", "response_a": 3, "response_b": "b"}, "response_a", "bad_value"),
        ({"prompt": "p", "response_a": "a", "response_b": "b", "info": [1]}, "info", "bad_value"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path, row, field, kind):
    good = {"prompt": "p", "response_a": "a", "response_b": "b"}
    path = write_jsonl(tmp_path / "bad.jsonl", [good, row])
    with pytest.raises(DataError) as err:
        read_tasks(path)
    assert err.value.kind == kind and err.value.field == field
    assert "bad.jsonl" in str(err.value) and "line 2" in str(err.value)


def test_skip_bad_rows_counts_them(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"prompt": "p", "response_a": "a", "response_b": "b"}\nnot json\n')
    tasks, skipped = read_tasks(path, skip_bad_rows=True)
    assert len(tasks) == 1 and skipped.total == 1


def test_key_depends_on_content_only():
    a = TaskInput("p", "x", "y", source="one")
    b = TaskInput("p", "x", "y", source="two")
    c = TaskInput("p", "y", "x")
    assert a.key == b.key != c.key
    with pytest.raises(DataError, match="same text"):
        TaskInput("p", "x", "x")
