"""Pack: the index file's tables built from a plan, one file or shards."""

__all__: list[str] = []
