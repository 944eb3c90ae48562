"""`doit` builds the index here too: `doit`, `doit list`, `doit clean`.

Any Markdown repository can do the same with a `dodo.py` of one line:
    from pipeline.tasks import *  # noqa: F401,F403
"""

from pipeline.tasks import *  # noqa: F401,F403
from pipeline.tasks import STAGES, context

DOIT_CONFIG = {
    "default_tasks": list(STAGES),
    "backend": "sqlite3",
    "dep_file": str(context().config.state_path / "doit.sqlite3"),
    "verbosity": 0,
}
