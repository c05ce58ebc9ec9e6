"""Mutation testing for GPU kernels: operators, bug catalog, runner, scorer and CLI."""
