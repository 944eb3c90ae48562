"""The kernel: what the write side (pipeline/), the read side (query/) and the shell
(mdvdb/) share: the settings, the index file format, the embedding providers, the
lexical analyzer, plain text, project files, the per-user cache.

It imports nothing above it (an import-linter contract in pyproject.toml checks it).
Nothing is imported here: `kernel` is imported by every command, `mdvdb search`
included, so each user imports the module it needs (`from kernel import config`)."""

__all__ = [
    "config",
    "dotenv",
    "fusion_models",
    "index_format",
    "lazy_exports",
    "off_loop",
    "plain_text",
    "private",
    "project_files",
    "providers",
    "terminal",
    "text_analysis",
    "user_cache",
    "version",
]
