"""The package's version, in the kernel: the index meta records it (pipeline) and `mdvdb`
re-exports it, and neither may import the other's layer for it."""

__version__ = "0.1.0"

# The `schema_version` every `--json` output and MCP tool result carries (docs/json.md).
JSON_SCHEMA_VERSION = 1
