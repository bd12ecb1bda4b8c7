"""`llmsim serve ...`: every flag maps onto a `Settings` field of the same name."""
from __future__ import annotations

import argparse
import sys

from llmsim.errors import ConfigError
from llmsim.settings import Settings


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmsim", description="LLM API traffic simulator")
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the simulator server")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8080)")
    serve.add_argument("--config", help="YAML config file with settings")
    serve.add_argument("--profile", help="force one latency profile for all models (e.g. instant)")
    serve.add_argument("--ttft-ms", type=float, help="fixed time to first token, every model")
    serve.add_argument("--tbt-ms", type=float, help="fixed gap between tokens, every model")
    serve.add_argument("--target-tokens", type=int, help="generated length in tokens (default 100)")
    serve.add_argument("--seed", type=int, help="make text, latency and ids reproducible")
    serve.add_argument("--templates", help="directory of templates overriding ours")
    serve.add_argument("--spec", help="OpenAPI document overriding ours")
    serve.add_argument("--log-level", help="critical|error|warning|info|debug|trace")
    serve.add_argument("--generator", help="lorem|echo|fixed|random|sequence")
    serve.add_argument("--fixed-text", help="text said by the fixed generator")
    serve.add_argument("--allow-any-model", action="store_true", default=None,
                       help="answer for model names not in the catalogue")
    serve.add_argument("--usage-semantics", help="llmsim (default) or openai")
    serve.add_argument("--keepalive-ms", type=float, help="SSE keep-alive comment interval before the first token")
    serve.add_argument("--errors", type=_yaml, help="fault rates per request, YAML or kind=rate pairs, "
                       "e.g. 'rate_limit=0.01,server_error=0.001' (kinds: llmsim/data/faults.yaml)")
    serve.add_argument("--fault-schedule", type=_yaml,
                       help="scheduled faults as YAML, e.g. '[{kind: rate_limit, count: 3}]'")
    serve.add_argument("--api-key", dest="api_keys", action="append",
                       help="accept this Bearer API key (repeatable); with none, no authentication")
    serve.add_argument("--max-body-bytes", type=int, help="largest request body accepted (default 32 MiB)")
    return p


def _yaml(text: str):
    """A flag value as YAML; `a=1,b=2` is read as the mapping {a: 1, b: 2}."""
    import yaml
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"not valid YAML: {exc}") from None
    if isinstance(value, str) and "=" in value:
        pairs = [part.partition("=") for part in value.split(",") if part.strip()]
        value = {key.strip(): yaml.safe_load(raw) for key, _, raw in pairs}
    return value


def main(argv: list[str] | None = None) -> int:
    args = vars(parser().parse_args(argv))
    command = args.pop("command")
    try:
        settings = Settings.load(args)
        if command == "serve":
            return serve(settings)
    except ConfigError as exc:
        print(f"llmsim: configuration error: {exc}", file=sys.stderr)
        return 2
    return 1


def serve(settings: Settings) -> int:
    import uvicorn

    from llmsim.app import create_app

    app = create_app(settings)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                access_log=False, lifespan="on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
