"""Case suites: curated (every pull request) and exhaustive (nightly)."""
