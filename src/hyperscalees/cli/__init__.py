"""Command line: ``hyperscalees train|eval|env|bench``; argv -> config -> engine, nothing more."""
