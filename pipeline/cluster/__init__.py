"""Topic clusters of documents: the fit, its keys and its small cases."""

__all__: list[str] = []
