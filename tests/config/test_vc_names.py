"""VC names: any text HiveD accepts, and the one label form a name needs (`config/names.py`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from config.names import label_value_error, vc_from_label_value, vc_label_value, vc_name_error


def test_label_values_stand_for_themselves_and_others_are_encoded() -> None:
    assert vc_label_value("VC1") == "VC1" and vc_from_label_value("VC1") == "VC1"
    assert vc_label_value("team a!") == "b32.ORSWC3JAMEQQ"
    assert vc_from_label_value("b32.ORSWC3JAMEQQ") == "team a!"
    assert vc_label_value("x" * 37 + "!") is None  # too long for a label: the annotation carries it
    # a prefix that does not decode to a name needing it is an ordinary name
    assert vc_from_label_value("b32.NZXXI") == "b32.NZXXI"  # decodes to "not", a label value itself
    assert vc_name_error("VC1") is None and vc_name_error("surprise!") is None
    assert vc_name_error("") == "a VC name must not be empty"
    assert "reads as the label encoding of the VC name 'team a!'" in (vc_name_error("b32.ORSWC3JAMEQQ") or "")


@given(st.text(min_size=1, max_size=40))
def test_the_label_form_is_a_valid_label_value_and_reversible(name: str) -> None:
    value = vc_label_value(name)
    if value is None:
        assert len(name.encode()) > 36
        return
    assert label_value_error(value) is None
    if vc_name_error(name) is None:  # a name validate accepts maps back to itself
        assert vc_from_label_value(value) == name
