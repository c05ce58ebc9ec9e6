"""What the framework's tests share: the official schema kmut's JSON reports must follow."""

import json
from pathlib import Path

import pytest

REPORT_SCHEMA = Path(__file__).parent / "data" / "mutation-testing-report-schema-3.8.4.json"


@pytest.fixture(scope="session")
def schema_errors():
    """A function: the messages of every way a report breaks the mutation-testing-elements
    schema, empty for a valid report."""
    import jsonschema  # only the report tests need it; other tests run where it is missing

    validator = jsonschema.Draft7Validator(json.loads(REPORT_SCHEMA.read_text()))

    def errors(report: dict) -> list[str]:
        return [f"{'/'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(report)]

    return errors
