"""The runtime's MoQ relay: exposed outputs served at URLs (tatolab/_runtime/relay/relay.py), its
certificate (cert.py), where it listens (config.py), and what it should serve (wanted.py)."""
