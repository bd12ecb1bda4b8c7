"""A newcomer's first hour: each mistake stops `llmsim` with one line naming it and the fix (no
traceback, nothing made on disk), and a server that starts says what it runs."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from llmsim import __version__
from llmsim.testing import Server, free_port

pytestmark = pytest.mark.live


def environ(**extra: str) -> dict[str, str]:
    """This process's environment less its LLMSIM_* variables, plus `extra`."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("LLMSIM_")}, **extra}


def refused(*argv: str, env: dict | None = None, cwd=None, status: int | None = None) -> str:
    """The one line `llmsim ARGV` stops with (asserting it is one line, no traceback)."""
    result = subprocess.run([sys.executable, "-m", "llmsim", *argv], env=environ(**(env or {})), cwd=cwd,
                            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode in ((2, 3) if status is None else (status,)), result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr and "Warning" not in result.stderr, result.stderr
    return lines[0]


@pytest.mark.parametrize("argv, env, message", [
    (["serve", "--prot", "8081"], {},
     "llmsim serve: unknown flag --prot; did you mean --port? (see llmsim serve --help)"),
    (["serve", "--protect"], {}, "llmsim serve: unknown flag --protect; did you mean --protect-stats?"),
    (["serve", "--port", "eighty"], {}, "llmsim serve: argument --port: invalid int value: 'eighty'"),
    (["serve"], {"LLMSIM_API_KEY": "sk-x"},
     "llmsim: configuration error: environment: unknown variable LLMSIM_API_KEY; did you mean LLMSIM_API_KEYS?"),
    (["serve"], {"LLMSIM_SEDE": "7"}, "environment: unknown variable LLMSIM_SEDE; did you mean LLMSIM_SEED?"),
    (["serve", "--profile", "instnat"], {}, "profile: unknown latency profile 'instnat'"),
    (["serve", "--store", "memroy"], {}, "store 'memroy': not a store (did you mean 'memory'?); use one of: memory, "
     "lmdb:DIR, sqlite:PATH (or a path ending .db, .sqlite or .sqlite3), redis://HOST:PORT/DB (or rediss://, unix://)"),
    (["serve", "--store", "postgres://localhost/db"], {}, "store 'postgres://localhost/db': postgres:// is not a store"),
    (["serve", "--store", "http://127.0.0.1:6379"], {}, "store 'http://127.0.0.1:6379': http:// is not a store"),
    (["serve", "--store", "/nonexistent/dir/state.db"], {},
     "store '/nonexistent/dir/state.db': the directory /nonexistent/dir does not exist"),
    (["serve", "--store", "lmdb:"], {}, "store 'lmdb:': an LMDB directory needs a path after the colon"),
    (["serve", "--store", "sqlite:"], {}, "store 'sqlite:': a SQLite file needs a path after the colon"),
    (["serve", "--host", "no-such-host.invalid"], {}, "llmsim: cannot start: host 'no-such-host.invalid' (--host) "
     "is not an address of this machine"),
    (["serve", "--workers", "2", "--store", "memory"], {}, "store: 'memory' is private to one process"),
    (["record", "--upstream", "http://127.0.0.1:9"], {}, "the following arguments are required: --out"),
])
def test_a_mistake_is_one_line_naming_it_and_the_fix(tmp_path, argv, env, message):
    assert message in refused(*argv, env=env, cwd=tmp_path)
    assert list(tmp_path.iterdir()) == [], "nothing is made in the working directory"
    assert not os.path.exists("/nonexistent")


def test_a_mistyped_config_key_names_the_closest(tmp_path):
    (tmp_path / "llmsim.yaml").write_text("sed: 7\ngraceful_timeout: 5\n")
    line = refused("serve", "--config", str(tmp_path / "llmsim.yaml"))
    assert line.endswith("unknown setting 'sed'; did you mean 'seed'?")


@pytest.fixture
def taken():
    """A port something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("flags", [[], ["--workers", "2"], ["--server", "plain"], ["--server", "plain", "--workers", "2"]])
def test_a_port_in_use_is_named_with_the_way_out(taken, flags):
    line = refused("serve", "--port", str(taken), *flags, status=3)
    assert line == (f"llmsim: cannot start: 127.0.0.1:{taken}: Address already in use (another server?): stop it, "
                    "or choose another --port (--port 0 picks a free one)")


def test_a_redis_store_that_does_not_answer_stops_start_up_naming_it():
    port = free_port()
    line = refused("serve", "--port", "0", "--store", f"redis://:secret@127.0.0.1:{port}/0", status=3)
    assert line.startswith(f"llmsim: cannot start: the store redis://:***@127.0.0.1:{port}/0 does not answer (")
    assert line.endswith("start Redis there, or choose another --store") and "secret" not in line


def test_version():
    result = subprocess.run([sys.executable, "-m", "llmsim", "--version"], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == f"llmsim {__version__}" and result.returncode == 0


def test_serve_says_what_it_runs():
    with Server(["--profile", "instant", "--base-path", "/v1"]) as server:
        out = server.output()
    assert f"llmsim {__version__} serving {server.url} (1 worker, tuned server)" in out
    assert "APIs:    openai at /v1; anthropic at /anthropic/v1, /v1; gemini at /v1beta, /v1" in out
    assert "latency: none (--profile instant)" in out and "store:   memory" in out


def test_serve_with_default_latency_says_how_to_remove_it(tmp_path):
    with Server(["--store", f"lmdb:{tmp_path / 'store'}", "--workers", "2"]) as server:
        out = server.output()
    assert "latency: each model's profile (seconds per answer); add --profile instant for no latency" in out
    assert f"store:   lmdb:{tmp_path / 'store'}" in out and "(2 workers, tuned server)" in out


def test_record_says_where_it_listens_and_what_it_forwards_to(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "llmsim", "record", "--upstream", "http://127.0.0.1:9",
                             "--out", str(tmp_path / "fixtures"), "--port", str(port)],
                            env=environ(), stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        line = proc.stderr.readline()
        assert line.strip() == (f"llmsim record on http://127.0.0.1:{port}: forwarding to http://127.0.0.1:9, "
                                f"writing fixtures to {tmp_path / 'fixtures'} (Ctrl-C stops)")
    finally:
        proc.terminate()
        proc.wait(20)


def test_redis_going_away_and_coming_back_is_logged_once_each():
    """Not a line every 0.5 s poll: one when the shared settings cannot be read, one when they can."""
    from redisproc import RedisProcess
    redis = RedisProcess()      # (skips where redis-server is not installed)
    try:
        with Server(["--profile", "instant", "--store", redis.url]) as server:
            redis.stop()
            time.sleep(2.5)         # five polls
            redis.start()
            deadline = time.monotonic() + 20
            while "Redis answers again" not in server.output() and time.monotonic() < deadline:
                time.sleep(0.2)
            out = server.output()
            assert httpx.get(server.url + "/health").status_code == 200
    finally:
        redis.stop()
    assert out.count("shared settings: cannot read them from Redis") == 1, out
    assert out.count("shared settings: Redis answers again") == 1, out
    assert "UserWarning" not in out and "Traceback" not in out
