"""The pytest plugin installed with llmsim (llmsim.testing): test files of a user's project,
run by pytest in a subprocess as that project would, with the official openai client."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

pytestmark = [pytest.mark.live, pytest.mark.slow]

pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).parent / "example" / "test_example.py"


def test_the_readme_example_passes_against_the_session_server(pytester):
    pytester.makepyfile(test_example=EXAMPLE.read_text())
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)


def test_the_session_server_is_one_server_for_every_test(pytester):
    pytester.makepyfile("""
        seen = set()

        def test_one(llmsim_server):
            seen.add(llmsim_server.url)

        def test_two(llmsim_server):
            seen.add(llmsim_server.url)
            assert len(seen) == 1
            assert llmsim_server.openai_url == llmsim_server.url + "/v1"
    """)
    pytester.runpytest_subprocess().assert_outcomes(passed=2)


def test_factory_servers_take_their_seed(pytester):
    pytester.makepyfile("""
        from openai import OpenAI

        def text(server):
            client = OpenAI(base_url=server.openai_url, api_key="sk-test", max_retries=0)
            return client.responses.create(model="gpt-4o", input="Tell me a story.").output_text

        def test_same_seed_same_text_other_seed_other_text(llmsim_server_factory):
            first, again, other = (llmsim_server_factory(seed=s, generator="random")
                                  for s in (7, 7, 8))
            assert text(first) == text(again)
            assert text(first) != text(other)
    """)
    pytester.runpytest_subprocess().assert_outcomes(passed=1)


def test_factory_servers_take_their_api_keys(pytester):
    pytester.makepyfile("""
        import openai
        import pytest

        def test_only_the_right_key_gets_an_answer(llmsim_server_factory):
            server = llmsim_server_factory(api_keys=["sk-right"])
            def ask(key):
                client = openai.OpenAI(base_url=server.openai_url, api_key=key, max_retries=0)
                return client.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "Hi."}])
            assert ask("sk-right").choices[0].message.content
            with pytest.raises(openai.AuthenticationError):
                ask("sk-wrong")
    """)
    pytester.runpytest_subprocess().assert_outcomes(passed=1)


def test_factory_servers_are_stopped_when_the_test_ends(pytester, tmp_path):
    ports = tmp_path / "ports.json"
    pytester.makepyfile(f"""
        import json

        def test_two_servers(llmsim_server_factory):
            servers = [llmsim_server_factory(), llmsim_server_factory(fault_schedule=[{{"kind": "rate_limit", "count": 1}}])]
            open({str(ports)!r}, "w").write(json.dumps([s.port for s in servers]))
    """)
    pytester.runpytest_subprocess().assert_outcomes(passed=1)
    started = json.loads(ports.read_text())
    assert len(set(started)) == 2
    for port in started:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still accepts connections"


def test_a_mistyped_setting_fails_with_the_configuration_error(pytester):
    pytester.makepyfile("""
        def test_typo(llmsim_server_factory):
            llmsim_server_factory(sed=7)
    """)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ConfigError*unknown setting 'sed'*"])


def test_a_server_that_cannot_start_fails_with_what_it_printed(pytester, tmp_path):
    pytester.makepyfile(f"""
        def test_no_templates(llmsim_server_factory):
            llmsim_server_factory(templates={str(tmp_path)!r})
    """)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*llmsim serve exited with status*", "*no *.yaml templates found*"])


def test_factory_settings_reach_the_server_unchanged():
    """Values the environment could misread: a tiny rate, a number-like text, a null."""
    from llmsim.settings import Settings
    from llmsim.testing import settings_environ
    given = dict(errors={"rate_limit": 1e-05}, fixed_text="42", store_ttl_s=None, tbt_ms=2.5,
                 api_keys=["sk-a", "sk b"], fault_schedule=[{"kind": "rate_limit", "count": 2}])
    assert Settings.load(environ=settings_environ(given)) == Settings().replace(**given)


def test_a_server_whose_port_another_server_holds_is_not_taken_for_it():
    """The port was found free, then another server bound it first: that one's /health must
    not pass for the new server's (which exits, unable to bind)."""
    import pytest

    from llmsim.testing import Server
    with Server(["--profile", "instant"]) as first:
        with pytest.raises(RuntimeError, match="Address already in use"):
            Server(["--profile", "instant"], port=first.port, timeout=60)
