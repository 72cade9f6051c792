"""A judge served by ``nlhf judge serve``, used over HTTP as if it were in this process.

    judge = remote_judge("http://127.0.0.1:8780", token)   # or $NLHF_JUDGE_TOKEN
    judge(prompts, a, b)                                   # POST /compare
    judge.scores(prompts, completions)                     # POST /scores (score judges)

``GET /info`` says what the server holds (``{"kind": "score" | "pairwise", "scale",
"judge"}``); a score judge's client is a :class:`ScoreJudge`, so RLHF-PPO can use it.
Several trainers (or GPUs) can share one judge model this way.  A server too busy to answer
before its deadline (503) is asked again until the client's own timeout; other refusals and
failures are :class:`ModelError` naming the server and its answer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import torch

from nlhf.models.errors import ModelError
from nlhf.models.judges.base import ScoreJudge, check

TOKEN_ENV = "NLHF_JUDGE_TOKEN"  # the token, where ``ps`` does not show it


class _Client:
    def __init__(self, url: str, token: str = "", timeout: float = 600.0) -> None:
        import httpx  # noqa: PLC0415 - httpx is no dependency of nlhf

        self.url, self.timeout = url.rstrip("/"), timeout
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def ask(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """The server's answer; a 503 (busy past its deadline) is asked again until timeout."""
        import httpx  # noqa: PLC0415 - httpx is no dependency of nlhf

        give_up = time.monotonic() + self.timeout
        try:
            while (r := self.http.request(method, path, json=body)).status_code == 503:
                if time.monotonic() > give_up:
                    break
                time.sleep(1.0)
        except httpx.HTTPError as exc:
            raise ModelError(f"{self.url}: judge server unreachable ({exc})") from None
        if r.status_code != 200:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            raise ModelError(f"{self.url}{path}: {r.status_code} {str(detail)[:300]}")
        return r.json()


class RemoteJudge:
    """P(a ≻ b | x) from a judge server."""

    def __init__(self, client: _Client, info: dict[str, Any]) -> None:
        self.client, self.info = client, info

    def __call__(self, prompts, a, b) -> torch.Tensor:
        check(prompts, a, b)
        body = {"prompts": list(prompts), "a": list(a), "b": list(b)}
        return torch.tensor(self.client.ask("POST", "/compare", body)["p"], dtype=torch.float32)


class RemoteScoreJudge(ScoreJudge):
    """A score judge on a judge server: scores over HTTP, P = σ(scale·(s(a) − s(b)))."""

    def __init__(self, client: _Client, info: dict[str, Any]) -> None:
        super().__init__(float(info.get("scale", 1.0)))
        self.client, self.info = client, info

    def scores(self, prompts: Sequence[str], completions: Sequence[str]) -> torch.Tensor:
        body = {"prompts": list(prompts), "completions": list(completions)}
        values = self.client.ask("POST", "/scores", body)["scores"]
        return torch.tensor(values, dtype=torch.float32)


def remote_judge(url: str, token: str = "") -> RemoteJudge | RemoteScoreJudge:
    """The client for the judge server at ``url`` (asks it what it serves)."""
    client = _Client(url, token or os.environ.get(TOKEN_ENV, ""))
    info = client.ask("GET", "/info")
    if info.get("kind") == "score":
        return RemoteScoreJudge(client, info)
    return RemoteJudge(client, info)
