"""Device and codec helpers below both the built-in nodes (_builtins) and the runtime (_runtime):
V4L2 devices (v4l2.py) and the encoder choice (encoders.py)."""
