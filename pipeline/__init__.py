"""The write side: scan, parse, chunk, embed and pack Markdown into one index file.

`pipeline.ingest.run(config)` is the entry point; `pipeline.tasks` holds the doit stages.
"""
