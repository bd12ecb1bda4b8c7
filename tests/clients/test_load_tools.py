"""Load-testing tools run out of the box against `llmsim serve --compat vllm` (docs/vllm.md):
guidellm and aiperf benchmark it (their tokenizer trained here, offline: flows/make_tokenizer.py)
and measure the configured latency, within 5%: their median time to first token is --ttft-ms,
their median inter-token latency (each request's mean gap) --tbt-ms. The server's usual
answer (--target-tokens 8) is shorter than what the tools ask for, so every answer being
exactly their output length shows that their ignore_eos (guidellm) and min_tokens (aiperf)
were honoured; both also ask for stream_options.continuous_usage_stats. locust (plain HTTP users)
runs against the default, OpenAI-strict server."""
from __future__ import annotations

import json
import subprocess

import pytest

from clientenvs import FLOWS, MATRIX_FLAGS, child_env, python_env

TTFT_MS, TBT_MS = 500, 20       # large enough that a busy machine's scheduling noise is under 5%
OUTPUT_TOKENS = 24
TOLERANCE = 0.05


@pytest.fixture(scope="module")
def vllm_server(live_server_factory):
    return live_server_factory("--compat", "vllm", "--ttft-ms", str(TTFT_MS), "--tbt-ms", str(TBT_MS),
                               "--target-tokens", "8")


def tokenizer(env, tmp_path_factory):
    path = tmp_path_factory.mktemp("tokenizer")
    subprocess.run([env.python, str(FLOWS / "make_tokenizer.py"), str(path)], check=True, env=child_env(),
                   timeout=300)
    return path


def within(measured: float, configured: float) -> bool:
    return abs(measured - configured) <= TOLERANCE * configured


def run_tool(command: list[str], cwd, timeout: float = 900, **env) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=child_env(**env))
    assert done.returncode == 0, f"{command[0]} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def test_guidellm_benchmarks_the_vllm_server(vllm_server, tmp_path, tmp_path_factory):
    env = python_env("guidellm")
    out = tmp_path / "guidellm.json"
    run_tool([env.bin("guidellm"), "run",
              "--backend", f"kind=openai_http,target={vllm_server.url},model=gpt-4o",
              "--profile", "kind=concurrent,streams=3",
              "--constraint", "kind=max_requests,count=12",
              "--data", f"kind=synthetic_text,prompt_tokens=64,output_tokens={OUTPUT_TOKENS}",
              "--tokenizer", f"kind=huggingface_auto,model={tokenizer(env, tmp_path_factory)}",
              "--output", f"kind=json,path={out}", "--disable-console-interactive"], tmp_path)
    metrics = json.loads(out.read_text())["benchmarks"][0]["metrics"]
    requests = metrics["request_totals"]
    assert requests["successful"] == 12 and requests["errored"] == 0, requests
    output = metrics["output_token_count"]["successful"]
    assert output["min"] == output["max"] == OUTPUT_TOKENS      # ignore_eos: exactly max_tokens
    ttft = metrics["time_to_first_token_ms"]["successful"]["median"]
    itl = metrics["inter_token_latency_ms"]["successful"]["median"]
    assert within(ttft, TTFT_MS), f"guidellm's median TTFT {ttft:.1f} ms, configured {TTFT_MS}"
    assert within(itl, TBT_MS), f"guidellm's median inter-token latency {itl:.2f} ms, configured {TBT_MS}"


def test_aiperf_profiles_the_vllm_server(vllm_server, tmp_path, tmp_path_factory):
    env = python_env("aiperf")
    out = tmp_path / "artifacts"
    run_tool([env.bin("aiperf"), "profile", "--model", "gpt-4o", "--url", vllm_server.url,
              "--endpoint-type", "chat", "--streaming", "--tokenizer", str(tokenizer(env, tmp_path_factory)),
              "--concurrency", "3", "--request-count", "12",
              "--prompt-input-tokens-mean", "64", "--prompt-input-tokens-stddev", "0",
              "--prompt-output-tokens-mean", str(OUTPUT_TOKENS), "--prompt-output-tokens-stddev", "0",
              "--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{OUTPUT_TOKENS}",
              "--use-server-token-count", "--per-chunk-usage",       # usage per chunk: continuous_usage_stats
              "--output-artifact-dir", str(out), "--no-auto-plot", "--random-seed", "1"], tmp_path,
             hub_offline=False)
    report = json.loads((out / "profile_export_aiperf.json").read_text())
    assert report["request_count"]["avg"] == 12 and not report.get("error_summary"), report.get("error_summary")
    lengths = report["output_sequence_length"]
    assert lengths["min"] == lengths["max"] == OUTPUT_TOKENS
    ttft = report["time_to_first_token"]["p50"]
    itl = report["inter_token_latency"]["p50"]
    assert within(ttft, TTFT_MS), f"aiperf's median TTFT {ttft:.1f} ms, configured {TTFT_MS}"
    assert within(itl, TBT_MS), f"aiperf's median inter-token latency {itl:.2f} ms, configured {TBT_MS}"


def test_locust_users_get_only_good_answers(live_server_factory, tmp_path):
    server = live_server_factory(*MATRIX_FLAGS)
    env = python_env("locust")
    done = subprocess.run([env.bin("locust"), "-f", str(FLOWS / "locustfile.py"), "--headless", "-u", "4", "-r", "4",
                           "-t", "6s", "--host", server.url, "--json", "--only-summary"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=child_env())
    assert done.returncode == 0, done.stderr[-4000:]
    stats = {entry["name"]: entry for entry in json.loads(done.stdout)}
    assert set(stats) == {"/v1/chat/completions", "/v1/chat/completions (stream)", "/v1/responses"}
    for name, entry in stats.items():
        assert entry["num_requests"] > 0 and entry["num_failures"] == 0, (name, entry["num_failures"])
