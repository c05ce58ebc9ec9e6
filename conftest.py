"""From a source checkout that is not installed, pytest gets the suites' plugin here (`--suite`,
`--device`, `--kmut`, the cases); installed, its entry point has registered the plugin under
this same name already, and this loads nothing more."""

pytest_plugins = ["suites.pytest_plugin"]
