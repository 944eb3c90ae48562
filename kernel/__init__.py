"""The kernel: what pipeline/, query/ and the shell share (docs/architecture.md). It imports
nothing above it, and nothing here: every command imports `kernel`, so each user imports the
module it needs (`from kernel import config`)."""

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
