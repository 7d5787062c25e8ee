"""What the runtime keeps on disk: kept-stream records and snapshots, streams' logs and reading them,
the machine lock, shared-memory namespaces, and writes it could not make."""
