"""Helpers every layer uses: one-line CLI errors and atomic file writes. Imports nothing of toylens."""
