"""``nlhf judge serve``: one judge model shared over HTTP by any number of trainers.

    nlhf judge serve --judge runs/rm/model                      # http://127.0.0.1:8780
    nlhf judge serve --judge path/to/classifier judge_label=POSITIVE judge_device=cuda:1
    nlhf train nash-md --judge http://127.0.0.1:8780             # from any trainer, eval, …

On loopback no token is needed unless ``judge_token`` is given; on any other address one is
required (a fresh one is printed once when none is given), and clients pass it as
``judge_token``.  Concurrent requests are batched (nlhf.judge.server).  The first line
printed is ``nlhf judge: serving <spec> on http://HOST:PORT``.
"""

from __future__ import annotations

import secrets
import sys
from dataclasses import dataclass
from typing import Literal

from nlhf.config import option
from nlhf.models.judges.load import JUDGE_HELP, JudgeFields


@dataclass
class Config(JudgeFields):
    """Serve a judge over HTTP (P(a ≻ b) and, for score judges, scores), batching requests."""

    judge: str = option("vader", JUDGE_HELP.replace("; http://HOST:PORT of nlhf judge serve", ""))
    host: str = option("127.0.0.1", "address to listen on; anything but loopback needs a token")
    port: int = option(8780, "TCP port; 0 picks a free one")
    max_batch: int = option(256, "most comparisons or scores per judge call")
    log_level: Literal["critical", "error", "warning", "info", "debug"] = option(
        "warning", "uvicorn log level"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be ≥ 1, got {self.max_batch}")
        if self.judge.startswith(("http://", "https://")):
            raise ValueError("judge: give a judge to serve, not another server")


def run(config: Config) -> int:
    from dataclasses import replace

    from nlhf.judge.server import create_app
    from nlhf.label.security import is_loopback
    from nlhf.label.server import bind, serve, url_of
    from nlhf.models.judges import load_judge

    token = config.judge_token
    if not token and not is_loopback(config.host):
        token = secrets.token_urlsafe(24)
    # the server batches; a cache in front of the model helps repeated comparisons
    judge = load_judge(config.judge, replace(config.judge_options(), token=""))
    app = create_app(judge, config.judge, token, config.max_batch)
    sock = bind(config.host, config.port)  # a port in use is a one-line error
    url = url_of(sock)
    print(f"nlhf judge: serving {config.judge} on {url}", flush=True)
    if token and not config.judge_token:
        print(f"  token required (shown once): judge_token={token}")
    elif token:
        print("  token required: clients pass judge_token")
    sys.stdout.flush()
    serve(app, sock, config.log_level)
    return 0
