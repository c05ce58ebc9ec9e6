"""A child process's PYTHONPATH: the project first, then the caller's path as it is now."""

import os

from kernel.python_path import PROJECT_ROOT, project_first


def test_the_callers_path_is_read_at_each_call_not_at_import(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "set-after-import"))
    assert project_first().split(os.pathsep) == [str(PROJECT_ROOT), str(tmp_path / "set-after-import")]
    monkeypatch.delenv("PYTHONPATH")
    assert project_first() == str(PROJECT_ROOT)


def test_an_environment_given_is_read_instead():
    assert project_first(environ={"PYTHONPATH": "/elsewhere"}) == f"{PROJECT_ROOT}{os.pathsep}/elsewhere"
