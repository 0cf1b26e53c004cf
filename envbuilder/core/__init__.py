"""The leaf, data and model layers every stage reads: errors, progress, files and their
journal, the host/compat facts, the spec grammar and model, the plan of an env."""
