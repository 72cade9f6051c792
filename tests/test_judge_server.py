"""``nlhf judge serve``: the server batches concurrent clients, answers what the judge in this
process answers, refuses malformed requests with a 4xx and keeps serving; trainers use it."""

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import torch

from nlhf.judge.server import create_app
from nlhf.label.server import running_server
from nlhf.models.errors import ModelError
from nlhf.models.judges import FunctionJudge, JudgeOptions, ScoreJudge, load_judge
from nlhf.models.judges.remote import RemoteJudge, RemoteScoreJudge, remote_judge


def length_score(prompt: str, completion: str) -> float:
    return len(completion) / 10.0


class SlowPairwise:
    """A pairwise judge that records the size of every call (to see the batching)."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, prompts, a, b):
        with self.lock:
            self.sizes.append(len(prompts))
        threading.Event().wait(0.05)  # long enough for other requests to queue up
        return torch.tensor([0.5 + 0.01 * (len(x) - len(y)) for x, y in zip(a, b, strict=True)])


def rows(i: int, n: int = 3):
    prompts = [f"p{i}-{j}" for j in range(n)]
    return prompts, [f"{'a' * (i + j)}" for j in range(n)], [f"b{j}" for j in range(n)]


def test_concurrent_clients_get_the_in_process_answers_in_shared_batches():
    judge = SlowPairwise()
    app = create_app(judge, spec="slow")
    with running_server(app) as url:
        client = remote_judge(url)
        assert isinstance(client, RemoteJudge)
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: client(*rows(i)), range(24)))
    for i, p in enumerate(answers):
        torch.testing.assert_close(p, SlowPairwise()(*rows(i)), atol=1e-6, rtol=0)
    assert sum(judge.sizes) == 24 * 3
    assert len(judge.sizes) < 24  # requests that waited were judged together
    assert max(judge.sizes) > 3


def test_a_score_judge_serves_scores_and_ppo_can_use_it():
    local = FunctionJudge(length_score, scale=2.0)
    with running_server(create_app(local, spec="length")) as url:
        client = remote_judge(url)
        assert isinstance(client, RemoteScoreJudge) and isinstance(client, ScoreJudge)
        assert client.scale == 2.0
        prompts, a, b = rows(5)
        torch.testing.assert_close(client.scores(prompts, a), local.scores(prompts, a))
        torch.testing.assert_close(client(prompts, a, b), local(prompts, a, b))


def test_malformed_requests_get_a_4xx_and_the_server_goes_on():
    with running_server(create_app(FunctionJudge(length_score), spec="length")) as url:
        bad = [
            ("/compare", {"prompts": ["x"], "a": ["y"]}),  # b missing
            ("/compare", {"prompts": ["x"], "a": ["y"], "b": ["z", "w"]}),  # lengths differ
            ("/compare", {"prompts": "x", "a": ["y"], "b": ["z"]}),
            ("/compare", {"prompts": [1], "a": ["y"], "b": ["z"]}),
            ("/compare", {"prompts": ["x"], "a": ["y"], "b": ["z"], "extra": 1}),
            ("/compare", [1, 2]),
            ("/scores", {"prompts": ["x"], "completions": []}),
            ("/nowhere", {}),
        ]
        with httpx.Client(base_url=url) as http:
            for path, body in bad:
                r = http.post(path, json=body)
                assert 400 <= r.status_code < 500 and r.json()["detail"], (path, body, r.text)
            r = http.post("/compare", content=b'{"prompts": ["\\ud800"], "a": ["y"], "b": ["z"]}',
                          headers={"content-type": "application/json"})  # fmt: skip
            assert r.status_code == 422 and "Unicode" in r.json()["detail"]
            r = http.post(
                "/compare", content=b"{not json", headers={"content-type": "application/json"}
            )
            assert r.status_code == 422
            assert http.get("/info").json()["kind"] == "score"  # still serving


def test_a_judge_that_fails_fails_the_request_not_the_server():
    def broken(prompt, completion):
        if completion == "boom":
            raise RuntimeError("the judge broke")
        return 1.0

    with running_server(create_app(FunctionJudge(broken), spec="broken")) as url:
        client = remote_judge(url)
        with pytest.raises(ModelError, match="500 the judge failed"):
            client.scores(["x"], ["boom"])
        assert client.scores(["x"], ["fine"]).tolist() == [1.0]


def test_a_token_is_required_when_the_server_has_one():
    with running_server(create_app(FunctionJudge(length_score), token="s3cret")) as url:
        with pytest.raises(ModelError, match="401"):
            remote_judge(url)
        with pytest.raises(ModelError, match="401"):
            remote_judge(url, token="wrong")
        assert remote_judge(url, token="s3cret").scores(["x"], ["abc"]).tolist() == [
            pytest.approx(0.3)
        ]


def test_load_judge_takes_a_url_and_an_unreachable_one_is_one_error():
    with running_server(create_app(FunctionJudge(length_score))) as url:
        judge = load_judge(url, JudgeOptions())
        assert judge.scores(["x"], ["abcd"]).tolist() == [pytest.approx(0.4)]
    with pytest.raises(ModelError, match="unreachable"):
        load_judge(url)


def test_the_serve_command_runs_and_answers(tmp_path):
    import subprocess
    import sys

    import children

    proc = subprocess.Popen(
        [sys.executable, "-m", "nlhf.cli", "judge", "serve", "--judge", "vader", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8",
        env=children.env(tmp_path), preexec_fn=children.default_signals,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        assert line.startswith("nlhf judge: serving vader on http://127.0.0.1:"), line
        url = line.split(" on ")[1].strip()
        judge = load_judge(url)
        assert isinstance(judge, ScoreJudge)
        p = judge(["x"], ["a wonderful film"], ["an awful film"])
        torch.testing.assert_close(
            p, load_judge("vader")(["x"], ["a wonderful film"], ["an awful film"])
        )
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_server_serves_a_judge_not_another_server():
    from nlhf.judge.serve_cli import Config

    with pytest.raises(ValueError, match="not another server"):
        Config(judge="http://127.0.0.1:1")
