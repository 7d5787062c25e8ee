"""Exposed outputs served to the Foxglove app over its WebSocket protocol, live, and recordings
played back under its playback controls; in a process of its own the runtime starts (main.py)."""
