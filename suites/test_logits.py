"""The op against the float64 oracle on every case of the selected suite."""

import pytest

from kernel import fp8_paged_mqa_logits
from suites.check import check_case

pytestmark = pytest.mark.triton_version


def test_case(case, device):
    check_case(case, fp8_paged_mqa_logits, device)
