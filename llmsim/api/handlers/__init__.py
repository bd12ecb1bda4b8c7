"""Thin handlers, one per operationId: validate what the schema cannot, plan, render, send."""
