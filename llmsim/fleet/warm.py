"""Build an app once in the supervisor, so that each forked backend builds its own in a tenth of the time.

Most of `create_app` is compiling the template directory, validating the OpenAPI documents
against the OpenAPI schema and parsing YAML: the same work for every backend. `install()`
makes this process remember each result by the bytes it came from (a directory's files, a
document, a file), as the test suite's conftest does for in-process apps; `warm()` then builds
one app, and every backend forked afterwards finds the results in its copy of this process's
memory. A backend with other templates, documents or data files misses, and does the work.
Each backend's templates are bound to its own settings (`variables`), exactly as if compiled
for it. Only the fleet supervisor installs this (never `llmsim serve`).
"""
from __future__ import annotations

import copy
import hashlib
from pathlib import Path

from llmsim.server import documents


def install() -> None:
    documents.validate_each_document_once()     # (connexion's internals: llmsim.server, as the rule is)
    _compile_each_template_directory_once()
    _parse_each_yaml_file_once()


def warm(settings) -> None:
    """One app built and dropped: the caches above filled."""
    from llmsim.app import create_app
    create_app(settings.replace(store=None, trace=None, replay=None, webhook_urls=None))


def _compile_each_template_directory_once() -> None:
    """A directory whose files are byte for byte those compiled before gets the same compiled
    templates, each bound to this set's own `variables` (its app's settings)."""
    from llmsim.render.templates import TemplateSet
    init, compiled = TemplateSet.__init__, {}

    def init_once(self, directory, variables=None):
        root = Path(directory)
        digest = hashlib.sha256()
        for path in sorted(root.rglob("*.yaml")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        key = (str(root.resolve()), digest.hexdigest())
        if key not in compiled:
            init(self, directory, variables)
            compiled[key] = self
            return
        self.__dict__.update(compiled[key].__dict__)
        self.directory, self.templates = root, {}
        for name, template in compiled[key].templates.items():
            self.templates[name] = copy.copy(template)
            self.templates[name].variables = variables or {}
    TemplateSet.__init__ = init_once


def _parse_each_yaml_file_once() -> None:
    """A YAML file whose bytes were parsed before gets a deep copy of what they gave; any other
    file (and every error) goes through `read_yaml` itself."""
    from llmsim import datafiles
    read, parsed = datafiles.read_yaml, {}

    def read_once(path):
        try:
            key = (str(Path(path).resolve()), Path(path).read_bytes())
        except OSError:
            return read(path)
        if key not in parsed:
            parsed[key] = read(path)
        return copy.deepcopy(parsed[key])
    datafiles.read_yaml = read_once
