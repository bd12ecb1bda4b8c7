"""What a stream's events mean (a token, the end, the response snapshot) is declared on the
template's steps (`delta`, `terminal`, `snapshot`), never read from event names: renamed
events keep fault cuts, stored streams and background responses working."""
from __future__ import annotations

import shutil
import time

import httpx
import pytest
import yaml

from conftest import REPO
from llmsim.app import create_app
from llmsim.errors import ConfigError
from llmsim.settings import Settings
from llmsim.testing import Server
from sse import parse

pytestmark = pytest.mark.usefixtures("warm_caches")     # builds apps of its own

MODEL = "gpt-4o-mini"
RENAMED = {"response.output_text.delta": "response.output_text.piece",
           "response.completed": "response.finished", "response.failed": "response.broke"}


def rename_events(directory) -> None:
    """Every event name of RENAMED, and its data's `type`, renamed in every template."""
    for path in directory.glob("*.yaml"):
        text = path.read_text()
        for old, new in RENAMED.items():
            text = text.replace(f"event: {old}\n", f"event: {new}\n").replace(f"type: {old}\n", f"type: {new}\n")
        path.write_text(text)


@pytest.fixture(scope="module")
def renamed(tmp_path_factory):
    """A live server whose templates name their events differently from ours."""
    directory = tmp_path_factory.mktemp("renamed") / "templates"
    shutil.copytree(REPO / "templates", directory)
    rename_events(directory)
    assert "response.output_text.piece" in (directory / "responses.yaml").read_text()
    with Server(["--templates", str(directory), "--profile", "instant", "--target-tokens", "12"]) as server:
        yield server


def stream(server, fault: str | None = None, **extra) -> tuple[str, list]:
    headers = {"x-llmsim-fault": fault} if fault else {}
    response = httpx.post(f"{server.openai_url}/responses", headers=headers, timeout=30,
                          json={"model": MODEL, "input": "Say something.", "stream": True, **extra})
    return response.text, parse(response.text)


def names(events) -> list:
    return [name for name, _ in events]


def test_an_after_tokens_fault_cuts_after_that_many_renamed_deltas(renamed):
    _, events = stream(renamed, "stream_error;after_tokens=3")
    assert names(events).count("response.output_text.piece") == 3
    assert names(events)[-1] == "error"


def test_a_cut_stops_before_the_renamed_terminal_event(renamed):
    _, events = stream(renamed, "stream_error;after_tokens=100000")
    assert names(events).count("response.output_text.piece") > 3       # every token went out,
    assert "response.finished" not in names(events) and names(events)[-1] == "error"   # the end did not


def test_a_stored_stream_replays_and_reads_back_as_its_renamed_last_event_left_it(renamed):
    text, events = stream(renamed)
    assert names(events)[-1] == "response.finished"
    finished = events[-1][1]["response"]
    replayed = httpx.get(f"{renamed.openai_url}/responses/{finished['id']}", params={"stream": "true"}, timeout=30)
    assert replayed.text == text
    stored = httpx.get(f"{renamed.openai_url}/responses/{finished['id']}", timeout=30).json()
    assert stored == finished and stored["status"] == "completed"


def test_a_cut_stream_reads_back_as_its_renamed_failure_left_it(renamed):
    _, events = stream(renamed, "stream_failed;after_tokens=2")
    assert names(events)[-1] == "response.broke"
    broke = events[-1][1]["response"]
    stored = httpx.get(f"{renamed.openai_url}/responses/{broke['id']}", timeout=30).json()
    assert stored == broke and stored["status"] == "failed"


def test_a_background_response_ends_with_its_renamed_last_event(renamed):
    queued = httpx.post(f"{renamed.openai_url}/responses", timeout=30,
                        json={"model": MODEL, "input": "In the background.", "background": True}).json()
    assert queued["status"] == "queued"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stored = httpx.get(f"{renamed.openai_url}/responses/{queued['id']}", timeout=30).json()
        if stored["status"] not in ("queued", "in_progress"):
            break
        time.sleep(0.05)
    assert stored["status"] == "completed" and stored["output"]
    replayed = parse(httpx.get(f"{renamed.openai_url}/responses/{queued['id']}", params={"stream": "true"},
                               timeout=30).text)
    assert names(replayed)[-1] == "response.finished" and replayed[-1][1]["response"] == stored


@pytest.fixture
def templates_copy(tmp_path):
    target = tmp_path / "templates"
    shutil.copytree(REPO / "templates", target)
    return target


def first_step(directory, change) -> None:
    path = directory / "responses.yaml"
    doc = yaml.safe_load(path.read_text())
    change(doc["stream"][0])
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.mark.parametrize("change, what", [
    (lambda step: step.__setitem__("delta", "maybe"), "stream[0]"),
    (lambda step: step.__setitem__("snapshot", "result"), "'result' is not a key of this step's data"),
    (lambda step: step.__setitem__("snapshot", "{{ key }}"), "stream[0].snapshot"),
], ids=["delta-not-a-flag", "snapshot-key-missing", "snapshot-an-expression"])
def test_a_bad_declaration_fails_start_up_naming_file_and_step(templates_copy, change, what):
    first_step(templates_copy, change)
    with pytest.raises(ConfigError) as caught:
        create_app(Settings(profile="instant", templates=str(templates_copy)))
    assert "responses.yaml" in str(caught.value) and what in str(caught.value)
