"""The long-running daemon: watcher, reconciliation loop, HTTP routes, metrics, the writer lock."""
