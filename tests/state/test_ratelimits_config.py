"""Rate-limit settings checked at start-up, OpenAI's duration format, and the admin document's
list of settings a PATCH /llmsim/config may change (in process: no server)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llmsim.cli import main
from llmsim.errors import ConfigError
from llmsim.settings import Settings
from llmsim.state.liveconfig import patchable
from llmsim.state.ratelimits import duration

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("seconds, written", [(0, "0s"), (0.02, "20ms"), (0.0004, "1ms"), (1, "1s"),
                                              (1.5, "1.5s"), (12, "12s"), (90.5, "1m30.5s"),
                                              (360, "6m0s"), (3723, "1h2m3s")])
def test_durations_are_written_as_openai_writes_them(seconds, written):
    assert duration(seconds) == written


def test_a_bad_rate_limit_in_the_config_file_stops_start_up_naming_the_key(tmp_path):
    config = tmp_path / "llmsim.yaml"
    config.write_text("rate_limits: {models: {gpt-4o: {rpm: 0}}}\n")
    with pytest.raises(ConfigError) as caught:
        Settings.load({"config": str(config)}, environ={})
    assert "at rate_limits.models.gpt-4o.rpm: 0 is less than the minimum of 1" in str(caught.value)


def test_an_unknown_rate_limit_key_stops_start_up(tmp_path):
    config = tmp_path / "llmsim.yaml"
    config.write_text("rate_limits: {default: {rph: 5}}\n")
    with pytest.raises(ConfigError) as caught:
        Settings.load({"config": str(config)}, environ={})
    assert "rate_limits.default" in str(caught.value) and "rph" in str(caught.value)


def test_rate_limits_come_from_the_environment_too():
    settings = Settings.load({}, environ={"LLMSIM_RATE_LIMIT_RPM": "5", "LLMSIM_RATE_LIMIT_TPM": "1000"})
    assert (settings.rate_limit_rpm, settings.rate_limit_tpm) == (5, 1000)


def test_serve_with_a_bad_rate_limit_flag_exits_with_status_2(capsys):
    assert main(["serve", "--rate-limit-rpm", "0"]) == 2
    assert "rate_limit_rpm" in capsys.readouterr().err


def test_the_admin_document_lists_every_patchable_setting():
    doc = yaml.safe_load((REPO / "openapi" / "admin.yaml").read_text())
    assert set(doc["components"]["schemas"]["ConfigChanges"]["properties"]) == set(patchable())
