"""``nlhf judge serve``: one judge model shared over HTTP by any number of trainers.

    nlhf judge serve --judge runs/rm/model                      # http://127.0.0.1:8780
    nlhf judge serve --judge path/to/classifier judge_label=POSITIVE judge_device=cuda:1
    nlhf train nash-md --judge http://127.0.0.1:8780             # from any trainer, eval, …

On loopback no token is needed unless one is given; on any other address one is required (a
fresh one is printed once when none is given).  Server and clients take it from
``NLHF_JUDGE_TOKEN`` (which ``ps`` does not show) or ``judge_token``.  Concurrent requests are
batched; texts longer than 16 × ``judge_max_length`` characters, and requests past the
``deadline``, are refused (nlhf.judge.server).  The first line printed is
``nlhf judge: serving <spec> on http://HOST:PORT``.
"""

from __future__ import annotations

import math
import os
import secrets
import sys
from dataclasses import dataclass, replace
from typing import Literal

from nlhf.config import option
from nlhf.judge.server import CHARS_PER_TOKEN, create_app
from nlhf.models.judges import load_judge
from nlhf.models.judges.load import JUDGE_HELP, JudgeFields
from nlhf.models.judges.remote import TOKEN_ENV
from nlhf.web import bind, is_loopback, serve, url_of


@dataclass
class Config(JudgeFields):
    """Serve a judge over HTTP (P(a ≻ b) and, for score judges, scores), batching requests."""

    judge: str = option("vader", JUDGE_HELP.replace("; http://HOST:PORT of nlhf judge serve", ""))
    host: str = option("127.0.0.1", "address to listen on; anything but loopback needs a token")
    port: int = option(8780, "TCP port; 0 picks a free one")
    max_batch: int = option(256, "most comparisons or scores per judge call")
    deadline: float = option(
        120.0, "seconds a request may wait for its answer; then 503 (dropped if not started)"
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = option(
        "warning", "uvicorn log level"
    )

    def check(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        self.at_least(1, "max_batch")
        if not 0 < self.deadline < math.inf:
            raise ValueError(f"deadline must be a number of seconds > 0, got {self.deadline}")
        if self.judge.startswith(("http://", "https://")):
            raise ValueError("judge: give a judge to serve, not another server")


def run(config: Config) -> int:
    given = config.judge_token or os.environ.get(TOKEN_ENV, "")
    token = given or ("" if is_loopback(config.host) else secrets.token_urlsafe(24))
    # the server batches; a cache in front of the model helps repeated comparisons
    judge = load_judge(config.judge, replace(config.judge_options(), token=""))
    max_chars = CHARS_PER_TOKEN * config.judge_max_length
    app = create_app(judge, config.judge, token, config.max_batch, max_chars, config.deadline)
    sock = bind(config.host, config.port)  # a port in use is a one-line error
    url = url_of(sock)
    print(f"nlhf judge: serving {config.judge} on {url}", flush=True)
    if token and not given:
        print(f"  token required (shown once): {TOKEN_ENV}={token}")
    elif token:
        print(f"  token required: clients set {TOKEN_ENV} or pass judge_token")
    sys.stdout.flush()
    serve(app, sock, config.log_level)
    return 0
