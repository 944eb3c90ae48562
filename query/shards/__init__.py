"""Reading a sharded index: the shard files' parts, their wire and stages."""

__all__: list[str] = []
