"""``nlhf judge serve``: the server batches concurrent clients, answers what the judge in this
process answers, refuses malformed, oversized, unauthenticated and late requests with a 4xx or
503 and keeps serving; a failing request fails alone; trainers use it.  The memory and stall
claims are measured on a server in a subprocess."""

import logging
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch

import children
from nlhf.judge.server import create_app
from nlhf.models.errors import ModelError
from nlhf.models.judges import FunctionJudge, JudgeOptions, ScoreJudge, load_judge
from nlhf.models.judges.remote import RemoteJudge, RemoteScoreJudge, remote_judge
from nlhf.web import running_server


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


def start(tmp_path, *options, **env):
    """``nlhf judge serve --judge vader`` in a subprocess; returns it and its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "nlhf.cli", "judge", "serve", "--judge", "vader", "--port", "0",
         "--log-level", "error", *options],
        stdout=subprocess.PIPE, stderr=(tmp_path / "stderr.txt").open("w"), encoding="utf-8",
        env=children.env(tmp_path, **env), preexec_fn=children.default_signals,
    )  # fmt: skip
    line = proc.stdout.readline()
    assert line.startswith("nlhf judge: serving vader on http://127.0.0.1:"), line
    return proc, line.split(" on ")[1].strip()


def stop(proc):
    proc.terminate()
    proc.wait(10)


def test_the_serve_command_answers_and_takes_its_token_from_the_environment(tmp_path, monkeypatch):
    proc, url = start(tmp_path, NLHF_JUDGE_TOKEN="from-the-env")
    try:
        with pytest.raises(ModelError, match="401"):
            load_judge(url)
        monkeypatch.setenv("NLHF_JUDGE_TOKEN", "from-the-env")
        judge = load_judge(url)
        assert isinstance(judge, ScoreJudge)
        p = judge(["x"], ["a wonderful film"], ["an awful film"])
        torch.testing.assert_close(
            p, load_judge("vader")(["x"], ["a wonderful film"], ["an awful film"])
        )
    finally:
        stop(proc)


def test_a_server_serves_a_judge_not_another_server():
    from nlhf.judge.serve_cli import Config

    with pytest.raises(ValueError, match="not another server"):
        Config(judge="http://127.0.0.1:1")


def test_a_text_longer_than_the_judge_reads_is_refused_before_it_is_scored():
    seen = []
    judge = FunctionJudge(lambda prompt, completion: seen.append(completion) or 1.0)
    with running_server(create_app(judge)) as url, httpx.Client(base_url=url) as http:
        fits = http.post("/scores", json={"prompts": ["x"], "completions": ["a" * 16 * 512]})
        r = http.post("/compare", json={"prompts": ["x"], "a": ["y"], "b": ["b" * 8193]})
    assert fits.status_code == 200 and seen == ["a" * 8192]
    assert r.status_code == 413 and r.json()["detail"].startswith("b[0] has 8193 characters")


def test_a_request_past_its_deadline_gets_503_and_is_dropped_if_not_started():
    seen, judging = [], threading.Event()
    ask = {"prompts": ["x"], "completions": ["slow"]}

    def slow(prompt, completion):
        seen.append(completion)
        if completion == "slow":
            judging.set()
            time.sleep(3.0)
        return 1.0

    app = create_app(FunctionJudge(slow), deadline=1.0)
    with running_server(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(http.post, "/scores", json=ask)
            assert judging.wait(30)
            queued = http.post("/scores", json={"prompts": ["x"], "completions": ["queued"]})
            first = first.result()
        assert first.status_code == queued.status_code == 503
        assert first.headers["retry-after"] == "1" and "within 1 s" in first.json()["detail"]
        time.sleep(3.0)  # the worker finishes "slow", then drops "queued" unjudged
        after = http.post("/scores", json={"prompts": ["x"], "completions": ["after"]})
    assert after.json() == {"scores": [1.0]}
    assert seen == ["slow", "after"]


def test_a_client_asks_again_after_a_503_until_it_gets_its_answer():
    calls = []

    def slow_once(prompt, completion):
        calls.append(completion)
        if len(calls) == 1:
            time.sleep(2.5)
        return 1.0

    with running_server(create_app(FunctionJudge(slow_once), deadline=1.0)) as url:
        assert remote_judge(url).scores(["x"], ["y"]).tolist() == [1.0]
    assert calls == ["y", "y"]  # the first answer came too late; the second was asked anew


def test_a_failing_request_among_8_concurrent_clients_fails_alone():
    holding = threading.Event()

    def picky(prompt, completion):
        if completion == "hold":  # keeps the worker busy while the eight queue up
            holding.set()
            time.sleep(2.0)
        if completion == "boom":
            raise RuntimeError("the judge cannot read boom")
        return float(len(completion))

    app = create_app(FunctionJudge(picky))
    with running_server(app) as url:
        client = remote_judge(url)

        def ask(i):
            try:
                return client.scores(["x"], ["boom" if i == 3 else "a" * i]).tolist()
            except ModelError as exc:
                return str(exc)

        with ThreadPoolExecutor(9) as pool:
            hold = pool.submit(client.scores, ["x"], ["hold"])
            assert holding.wait(30)
            answers = list(pool.map(ask, range(8)))
            hold.result()
        batches = app.state.batcher.batches
    assert "500 the judge failed: RuntimeError: the judge cannot read boom" in answers[3]
    assert [a for i, a in enumerate(answers) if i != 3] == [[float(i)] for i in range(8) if i != 3]
    assert batches < 9  # the seven were judged together


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def test_wrong_tokens_are_logged_and_slowed_down_and_a_401_asks_for_bearer(caplog):
    app = create_app(FunctionJudge(length_score), token="s3cret")
    with running_server(app) as url, httpx.Client(base_url=url) as http:
        with caplog.at_level(logging.WARNING, logger="nlhf.judge.server"):
            guesses = [http.get("/info", headers=bearer(f"g{i}")) for i in range(8)]
            right = http.get("/info", headers=bearer("s3cret"))
        assert [r.status_code for r in guesses] == [401] * 6 + [429] * 2
        assert guesses[0].headers["www-authenticate"] == "Bearer"
        assert right.status_code == 429  # even the right token waits out the pause
        time.sleep(int(right.headers["retry-after"]))
        assert http.get("/info", headers=bearer("s3cret")).status_code == 200
    warned = [r.getMessage() for r in caplog.records if "wrong token" in r.getMessage()]
    assert len(warned) == 6 and "from 127.0.0.1 (6 in a row)" in warned[-1]


def test_the_token_is_checked_before_the_body_is_read():
    import socket
    from urllib.parse import urlsplit

    app = create_app(FunctionJudge(length_score), token="s3cret")
    with running_server(app) as url:
        where = urlsplit(url)
        with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
            sock.sendall(
                b"POST /scores HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 60000000\r\n\r\n"  # and no body: the answer must not wait for it
            )
            assert sock.recv(4096).startswith(b"HTTP/1.1 401")


def memory_mb(pid: int, field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of a process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field}")


def post_raw(url: str, path: str, body: bytes) -> str:
    """POST ``body`` without a token, stopping as soon as the server answers or closes; the
    status line, or "reset" when it closed without one."""
    import select
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(url)
    with socket.create_connection((where.hostname, where.port), timeout=60) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode())
        view = memoryview(body)
        try:
            for start in range(0, len(body), 1 << 20):
                if select.select([sock], [], [], 0)[0]:
                    break  # answered (or closed) before the body was sent
                sock.sendall(view[start : start + (1 << 20)])
            return sock.recv(4096).decode("latin-1").split("\r\n")[0] or "reset"
        except (BrokenPipeError, ConnectionResetError):
            return "reset"


@pytest.mark.slow
def test_four_unauthenticated_60_MB_bodies_leave_peak_memory_within_50_MB(tmp_path):
    proc, url = start(tmp_path, NLHF_JUDGE_TOKEN="s3cret")
    try:
        assert remote_judge(url, "s3cret").scores(["x"], ["a good film"]).shape == (1,)
        before = memory_mb(proc.pid, "VmHWM")
        body = b"[" * (60 * 2**20)
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: post_raw(url, "/scores", body), range(4)))
        grown = memory_mb(proc.pid, "VmHWM") - before
        print(f"\nfour unauthenticated 60 MB bodies: {answers}, peak RSS +{grown:.1f} MB")
        assert all(a in ("HTTP/1.1 401 Unauthorized", "reset") for a in answers), answers
        assert grown < 50
    finally:
        stop(proc)


@pytest.mark.slow
def test_40_unique_8_MB_prompts_leave_memory_within_50_MB(tmp_path):
    proc, url = start(tmp_path, "judge_max_length=600000")  # texts up to 9.6 M characters
    try:
        with httpx.Client(base_url=url, timeout=120) as http:

            def ask(i):
                body = {"prompts": [f"{i} " + "x" * 8_000_000], "completions": ["a good film"]}
                assert http.post("/scores", json=body).status_code == 200

            for i in range(3):
                ask(i)
            before = memory_mb(proc.pid, "VmRSS")
            for i in range(3, 43):
                ask(i)
            grown = memory_mb(proc.pid, "VmRSS") - before
        print(f"\n40 unique 8 MB prompts: RSS +{grown:.1f} MB")
        assert grown < 50
    finally:
        stop(proc)


@pytest.mark.slow
def test_a_200_kB_punctuation_text_leaves_a_parallel_request_under_a_second(tmp_path):
    proc, url = start(tmp_path, "judge_max_length=16384")  # 262,144 characters: it is scored
    small = {"prompts": ["x"], "completions": ["a good film"]}
    try:
        with httpx.Client(base_url=url, timeout=300) as http, ThreadPoolExecutor(1) as pool:
            assert http.post("/scores", json=small).status_code == 200
            start_time = time.monotonic()
            big = pool.submit(
                http.post, "/scores", json={"prompts": ["x"], "completions": ["!" * 200_000]}
            )
            time.sleep(0.1)
            waits = []
            while not (big.done() and waits):
                sent = time.monotonic()
                assert http.post("/scores", json=small).status_code == 200
                waits.append(time.monotonic() - sent)
            answer, took = big.result(), time.monotonic() - start_time
        print(f"\n200 kB of '!': answered in {took:.2f} s, parallel requests in {max(waits):.3f} s")
        assert answer.status_code == 200 and took < 120  # the server's default deadline
        assert max(waits) < 1.0
    finally:
        stop(proc)
