"""llmsim: an LLM API traffic simulator (OpenAI Responses and Chat Completions)."""

__version__ = "0.1.0"
