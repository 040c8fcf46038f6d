"""``agentrl view RUN_DIR``: a local web page to browse a run's episodes beside its curves."""

from agentrl.monitor.viewer.app import create_app, serve

__all__ = ["create_app", "serve"]
