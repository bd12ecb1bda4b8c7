"""llmsim: an LLM API traffic simulator (OpenAI Responses and Chat Completions)."""

import warnings

__version__ = "0.1.0"

# connexion imports starlette.testclient (for AsyncApp.test_client, which llmsim never calls) and
# starlette warns at that import unless httpx2 is installed: ignore that one warning, raised
# there only. Here because any llmsim module may be the first to import connexion.
warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`",
                        module="connexion.apps.abstract")
