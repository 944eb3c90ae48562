"""The write side: scan, parse, chunk, embed and pack Markdown into one index file.

`pipeline.ingest.ingest_folder(config)` is the entry point; `pipeline.stages` holds the
typed stages and `pipeline.tasks` their doit tasks.
"""
