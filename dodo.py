"""`doit` builds the index here too: `doit`, `doit list`, `doit clean`.

Any Markdown repository can do the same with a `dodo.py` of one line:
    from pipeline.tasks import *  # noqa: F401,F403
(doit's settings then are its defaults; these are the ones `mdvdb ingest` uses). Importing
this file reads the configuration and nothing else: no lock, no database, no state.
"""

from kernel.config import load_config
from pipeline.tasks import *  # noqa: F401,F403
from pipeline.tasks import doit_config

DOIT_CONFIG = doit_config(load_config())
