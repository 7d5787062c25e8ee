"""Recording outputs to MCAP files and reading them back (``tatolab record``, ``McapSource``)."""
