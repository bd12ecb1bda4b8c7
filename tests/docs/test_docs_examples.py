"""The README's and docs' examples, run: Python blocks that talk to `127.0.0.1:8080` and the
`curl` commands against a live server, every `llmsim serve` / `llmsim record` command line
through the real parser and settings checks, and the YAML files the docs show through their
schemas. An example that stops working fails here (`-m docs` runs this group alone)."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import REPO
from llmsim import datafiles
from llmsim.cli import parser
from llmsim.settings import Settings
from llmsim.testing import Server

pytestmark = [pytest.mark.live, pytest.mark.docs]

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
URL = re.compile(r"(http://)?(127\.0\.0\.1|localhost):8080")


def blocks(*languages: str):
    """(page, index, code) of every fenced block in one of `languages`."""
    for page in PAGES:
        found = re.findall(r"^```(\w*)\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)
        for index, (language, code) in enumerate(found):
            if language in languages:
                yield pytest.param(page, code, id=f"{page.relative_to(REPO)}#{index}")


def scenario_file(tmp_path_factory):
    """docs/scenarios.md's scenario file, as the page shows it."""
    text = (REPO / "docs" / "scenarios.md").read_text(encoding="utf-8")
    code = next(c for lang, c in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)
                if lang == "yaml" and c.startswith("# scenarios.yaml"))
    path = tmp_path_factory.mktemp("scenarios") / "scenarios.yaml"
    path.write_text(code)
    return path


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """A server as a page's examples expect it (latency off, so that they run at once)."""
    made = {}

    def server(page):
        flags = ["--scenarios", str(scenario_file(tmp_path_factory))] if page.name == "scenarios.md" else []
        key = tuple(flags)
        if key not in made:
            made[key] = Server(["--profile", "instant", *flags])
        return made[key]
    yield server
    for server in made.values():
        server.stop()


def environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("LLMSIM_", "OPENAI_"))}


def live(code: str, server) -> str:
    return URL.sub(lambda m: server.url if m.group(1) else server.url.removeprefix("http://"), code)


@pytest.mark.parametrize("page, code", [p for p in blocks("python")
                                        if "8080" in p.values[1] and "8081" not in p.values[1]])
def test_a_python_example_runs_against_a_live_server(servers, page, code):
    result = subprocess.run([sys.executable, "-c", live(code, servers(page))], env=environ(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]


def curl_block(code: str) -> bool:
    """A shell block of `curl` commands (and comments) only."""
    return code.lstrip().startswith("curl") and "llmsim " not in code


@pytest.mark.parametrize("page, code", [p for p in blocks("bash", "sh") if curl_block(p.values[1])])
def test_a_curl_example_gets_an_answer(servers, page, code):
    if "| jq" in code and shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    script = "set -e -o pipefail\n" + live(code, servers(page)).replace("curl -s ", "curl -sf ")
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip(), result


def command_lines():
    """`llmsim serve|record` commands: in shell blocks, and inline (`llmsim serve --flag ...`)."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        shell = "\n".join(c for lang, c in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)
                          if lang in ("bash", "sh", "yaml"))
        found = re.findall(r"\bllmsim (?:serve|record)\b[^\n`#&|)]*", shell)
        found += re.findall(r"`(llmsim (?:serve|record) --[^`]*)`", text)
        for line in found:
            if "..." not in line and "DIR" not in line.split():
                yield pytest.param(line.strip(), id=f"{page.relative_to(REPO)}: {line.strip()}")


@pytest.mark.parametrize("line", sorted({p.values[0]: p for p in command_lines()}.values(), key=lambda p: p.id))
def test_every_command_line_shown_is_accepted(line):
    """Its flags exist and its values pass the settings checks (files it names need not)."""
    argv = shlex.split(line)[1:]
    args = vars(parser().parse_args(argv))
    if args.pop("command") == "serve":
        Settings.load({k: v for k, v in args.items() if k != "config"}, environ={})    # (the file shown need not exist)


def test_the_config_files_shown_are_valid(tmp_path):
    """rate-limits.md's config file, serving-model.md's profiles.yaml and scenarios.md's scenarios."""
    text = (REPO / "docs" / "rate-limits.md").read_text(encoding="utf-8")
    config = next(c for lang, c in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)
                  if lang == "yaml" and "--config" in c)
    (tmp_path / "llmsim.yaml").write_text(config)
    assert Settings.load({"config": str(tmp_path / "llmsim.yaml")}, environ={}).rate_limits["default"]["rpm"] == 500
    text = (REPO / "docs" / "serving-model.md").read_text(encoding="utf-8")
    profiles = next(c for lang, c in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)
                    if lang == "yaml" and "profiles:" in c)
    packaged = datafiles.read_yaml(datafiles.DATA_DIR / "profiles.yaml")
    shown = yaml.safe_load(profiles)
    merged = {**packaged, "profiles": {**packaged["profiles"], **shown["profiles"]}}
    datafiles.check(merged, "profiles", "docs/serving-model.md")


def test_the_readmes_settings_table_names_real_flags_variables_and_keys():
    """README's everyday table is written by hand: its flags, variables and keys must exist."""
    from llmsim import settings
    serve = parser().commands["serve"]
    flags = {s for action in serve._actions for s in action.option_strings}
    rows = [line for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines() if line.startswith("| `--")]
    assert len(rows) > 5
    for row in rows:
        flag_cell, env_cell, key_cell = row.strip("|").split(" | ")[:3]
        assert set(re.findall(r"`(--[\w-]+)", flag_cell)) <= flags, row
        names = re.findall(r"`(\w+)`", key_cell)
        assert all(name in settings.PROPERTIES or name == "auth" for name in names), row
        assert {v.removeprefix("LLMSIM_").lower() for v in re.findall(r"`(LLMSIM_\w+)`", env_cell)} <= \
            set(settings.PROPERTIES), row
