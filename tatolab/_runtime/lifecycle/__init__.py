"""A stream's life in the runtime: the loaded stream, the line loads wait in, the trust check before
any of its code runs, live changes, wiring across streams, watching for saves, recordings."""
