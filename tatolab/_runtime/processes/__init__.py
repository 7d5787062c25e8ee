"""The processes the runtime starts from a project's (or its own) Python: the one starter, node
supervision, process groups and the reaper, compiling and describing, the environment they get."""
