"""From a source checkout that is not installed, pytest gets the suites' plugin here (`--suite`,
`--device`, `--kmut`, the cases); installed, its entry point has registered the plugin under
this same name already, and this loads nothing more. The checkout's own session also holds
every refusal of the checks to a witness (`suites.refusal_witnesses`)."""

pytest_plugins = ["suites.pytest_plugin", "suites.refusal_witnesses"]
