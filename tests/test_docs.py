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


def test_the_configuration_tables_are_the_schemas():
    """docs/configuration.md's tables are built from llmsim/schemas/config.yaml, so they cannot drift."""
    from llmsim.settings import BEGIN, END, reference
    page = (REPO / "docs" / "configuration.md").read_text()
    assert BEGIN in page and END in page
    tables = page.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert tables == reference().strip(), \
        "docs/configuration.md's tables differ from llmsim/schemas/config.yaml: run `python -m llmsim.settings`"
