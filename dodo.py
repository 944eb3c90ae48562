"""`doit` builds the index here too: `doit`, `doit list`, `doit clean`.

Any Markdown repository can do the same with this one line: the star import brings the
stage tasks and `DOIT_CONFIG`, the settings `mdvdb ingest` uses (doit's DB in the state
folder). Importing it reads the configuration and makes the state folder: no lock, no
index, no cache.
"""

from pipeline.tasks import *  # noqa: F401,F403
