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


def test_templates_name_modules_that_exist():
    """The modules a template's description points readers to (docs/templates.md says to read them)."""
    import importlib
    import re
    missing = []
    for path in sorted((REPO / "templates").glob("*.yaml")):
        description = yaml.safe_load(path.read_text()).get("description") or ""
        text = description + "".join(re.findall(r"#.*", path.read_text()))
        for dotted in set(re.findall(r"\bllmsim(?:\.\w+)+", text)):
            parts = dotted.split(".")
            for cut in range(len(parts), 0, -1):       # the longest importable prefix, then attributes
                try:
                    obj = importlib.import_module(".".join(parts[:cut]))
                except ImportError:
                    continue
                try:
                    for name in parts[cut:]:
                        obj = getattr(obj, name)
                except AttributeError:
                    missing.append(f"{path.name}: {dotted}")
                break
            else:
                missing.append(f"{path.name}: {dotted}")
    assert missing == []
