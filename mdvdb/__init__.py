"""Markdown VDB: a filesystem-native vector database and search tool for folders of Markdown."""

__version__ = "0.1.0"
