"""The configuration reference a user reads (docs/configuration.md) names every setting the
server accepts (llmsim/schemas/config.yaml)."""
from __future__ import annotations

import yaml

from conftest import REPO


def test_the_configuration_reference_names_every_setting():
    schema = yaml.safe_load((REPO / "llmsim" / "schemas" / "config.yaml").read_text())
    reference = (REPO / "docs" / "configuration.md").read_text()
    missing = [key for key in schema["properties"] if key != "config" and f"`{key}`" not in reference]
    assert missing == [], f"docs/configuration.md does not describe: {', '.join(missing)}"
