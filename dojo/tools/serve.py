"""`dojo serve`: the reference inference system as an OpenAI-compatible HTTP server.

Loads SmolLM2 as `dojo demo` does (the same start-up cache), starts the engine
(solutions.system.serving.engine) and serves it with uvicorn (solutions.system.serving.server) on
127.0.0.1 unless `--host` says otherwise, until Ctrl-C, logging a line per request at `--log-level`
info. Any OpenAI client works against it:
`OpenAI(base_url=URL + "/v1", api_key="unused")`.
"""

from __future__ import annotations

import argparse
import signal
import threading

from dojo.practice import report


def run(args: argparse.Namespace) -> int:
    import torch
    import uvicorn

    from dojo.tools.loading import load_smollm2
    from solutions.system.kernels.weight_modes import check_mode, default_mode
    from solutions.system.serving.engine import Engine, EngineConfig
    from solutions.system.serving.server import MODEL_ID, bind, build_app, url_of

    out = report.console()
    mode = check_mode(args.weights or default_mode())
    try:
        sock = bind(args.host, args.port)  # before the slow load: a taken port fails at once
    except OSError as exc:
        raise ValueError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    config = EngineConfig() if args.kv_blocks is None else EngineConfig(num_blocks=args.kv_blocks)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    loaded = load_smollm2(mode, lambda s: None)
    engine = Engine(loaded.model, loaded.tokenizer.eos_token_id, config)
    url = url_of(sock)
    out.print(f"serving {MODEL_ID} ({mode} weights) at {url}/v1  (Ctrl-C stops)", markup=False)
    out.print(
        f"  try: curl {url}/v1/chat/completions -H 'Content-Type: application/json' -d "
        f'\'{{"model": "{MODEL_ID}", "messages": [{{"role": "user", "content": "Hi"}}]}}\'',
        markup=False,
    )
    server = uvicorn.Server(
        uvicorn.Config(
            build_app(engine, loaded.tokenizer),
            log_level=args.log_level,
            log_config=log_config(args.log_level),
            access_log=False,  # the server's own line per request says more (its time)
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
    )

    def http() -> None:
        try:
            server.run(sockets=[sock])
        finally:
            engine.close()  # uvicorn stopped (or failed): the loop below returns

    web = threading.Thread(target=http, name="http", daemon=True)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a SIGTERM stops as Ctrl-C does
    web.start()
    try:
        # The engine's loop on this thread, which loaded the model: one set of OpenMP threads
        # (Engine's docstring). uvicorn, on its own thread, leaves the signals to this one.
        engine.run()
    except KeyboardInterrupt:
        out.print("stopped", markup=False)
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.should_exit = True
        web.join(timeout=10)
        engine.close()
        sock.close()
    return 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def log_config(level: str) -> dict:
    """uvicorn's logging setup plus the server's request lines (server.REQUEST_LOG) on its stderr handler,
    both at `level` ("debug", "info", "warning", "error")."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    from solutions.system.serving.server import REQUEST_LOG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"][REQUEST_LOG.name] = {
        "handlers": ["default"],
        "level": level.upper(),
        "propagate": False,
    }
    return config


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve SmolLM2 over an OpenAI-compatible HTTP API")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free port)")
    p.add_argument(
        "--weights",
        default=None,
        metavar="MODE",
        help="fp32, bf16, int4, int4-q8 or int4-q8x2 (default: as `dojo demo`, the fastest that matches fp32's greedy answers)",
    )
    p.add_argument(
        "--kv-blocks",
        type=int,
        default=None,
        metavar="N",
        help="KV cache blocks of 16 positions (default 1024: 0.75 GB of fp32 keys and values); "
        "with fewer, fewer requests run at once",
    )
    p.add_argument(
        "--threads", type=int, default=None, metavar="N", help="torch threads (default: torch's choice)"
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="log level (default info: one line per request with its status and milliseconds; warning: none)",
    )
    p.set_defaults(func=run)
