"""The package's version, in the kernel: the index meta records it (pipeline) and `mdvdb`
re-exports it, and neither may import the other's layer for it."""

__version__ = "0.1.0"

# The version of the JSON every `--json` output and MCP tool result carries as
# `schema_version` (docs/json.md, docs/json-schema/mdvdb.schema.json): raised when a field
# is renamed, removed or changes meaning; a new field leaves it as it is.
JSON_SCHEMA_VERSION = 1
