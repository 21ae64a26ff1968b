"""Rendering results: rich tables for people, JSON, SARIF, JUnit, GitHub annotations and summaries."""
