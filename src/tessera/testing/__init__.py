"""Helpers for testing tessera: model fixtures and reference utilities."""
