"""Matrix expansion: product order, zip, exclude, include, where, and the errors."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.config.keypath import KeyPath, format_key_path
from orchestrator.errors import InputError, SourceLocation
from orchestrator.plan.matrix import expand_matrix


def locate(path: KeyPath) -> SourceLocation:
    # The key path as the "file" makes the location of every error visible in assertions.
    return SourceLocation(format_key_path(path) or "<root>", 1, 1)


def points(matrix: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [p.values for p in expand_matrix(matrix, locate=locate)]


def test_no_matrix_is_one_point_without_axes() -> None:
    assert points(None) == [{}]


def test_product_in_declared_order_first_axis_slowest() -> None:
    got = points({"a": [1, 2], "b": ["x", "y", "z"]})
    assert got == [
        {"a": 1, "b": "x"},
        {"a": 1, "b": "y"},
        {"a": 1, "b": "z"},
        {"a": 2, "b": "x"},
        {"a": 2, "b": "y"},
        {"a": 2, "b": "z"},
    ]
    assert [list(p) for p in got] == [["a", "b"]] * 6


def test_zip_groups_vary_together_and_keep_declared_key_order() -> None:
    got = points({"a": [1, 2], "b": ["p", "q", "r"], "c": [10, 20], "zip": [["a", "c"]]})
    assert got == [
        {"a": 1, "b": "p", "c": 10},
        {"a": 1, "b": "q", "c": 10},
        {"a": 1, "b": "r", "c": 10},
        {"a": 2, "b": "p", "c": 20},
        {"a": 2, "b": "q", "c": 20},
        {"a": 2, "b": "r", "c": 20},
    ]
    assert all(list(p) == ["a", "b", "c"] for p in got)


def test_zip_length_mismatch_is_an_error_at_the_zip_group() -> None:
    with pytest.raises(InputError) as err:
        points({"a": [1, 2], "c": [10], "zip": [["a", "c"]]})
    assert err.value.key_path == "matrix.zip[0]"
    assert "equal lengths" in err.value.message and "a: 2, c: 1" in err.value.message


def test_exclude_partial_entry_drops_every_matching_point() -> None:
    got = points({"a": [1, 2], "b": ["x", "y"], "exclude": [{"a": 1}]})
    assert got == [{"a": 2, "b": "x"}, {"a": 2, "b": "y"}]


def test_exclude_full_entry_drops_one_point() -> None:
    got = points({"a": [1, 2], "b": ["x", "y"], "exclude": [{"a": 1, "b": "y"}]})
    assert {"a": 1, "b": "y"} not in got and len(got) == 3


def test_exclude_unknown_axis_suggests_the_closest() -> None:
    with pytest.raises(InputError) as err:
        points({"nccl": ["a", "b"], "exclude": [{"ncl": "a"}]})
    assert err.value.key_path == "matrix.exclude[0].ncl"
    assert "unknown axis 'ncl'" in err.value.message
    assert err.value.hint == "did you mean 'nccl'?"


def test_exclude_value_the_axis_lacks_is_an_error() -> None:
    with pytest.raises(InputError) as err:
        points({"commit": ["bba2fc4", "3207427"], "exclude": [{"commit": "bba2fc5"}]})
    assert "not a value of axis 'commit'" in err.value.message


def test_include_appends_full_points_after_the_product() -> None:
    got = points({"a": [1], "b": ["x"], "include": [{"a": 9, "b": "z"}]})
    assert got == [{"a": 1, "b": "x"}, {"a": 9, "b": "z"}]
    origins = [p.origin for p in expand_matrix({"a": [1], "include": [{"a": 2}]}, locate=locate)]
    assert origins == [("matrix",), ("matrix", "include", 0)]


def test_include_must_name_every_axis_and_only_axes() -> None:
    with pytest.raises(InputError, match="missing: b"):
        points({"a": [1], "b": [2], "include": [{"a": 3}]})
    with pytest.raises(InputError, match="unknown axis 'c'"):
        points({"a": [1], "include": [{"a": 3, "c": 1}]})


def test_include_brings_back_an_excluded_point() -> None:
    got = points({"a": [1, 2], "exclude": [{"a": 1}], "include": [{"a": 1}]})
    assert got == [{"a": 2}, {"a": 1}]


def test_where_filters_the_product_with_matrix_in_scope() -> None:
    got = points({"tp": [1, 2, 4, 8], "batch": [1, 64], "where": "matrix.tp * matrix.batch <= 64"})
    assert {"tp": 8, "batch": 64} not in got
    assert {"tp": 1, "batch": 64} in got and len(got) == 5


def test_where_accepts_a_braced_template_too() -> None:
    assert points({"a": [1, 2], "where": "{{ matrix.a == 2 }}"}) == [{"a": 2}]


def test_where_undefined_name_is_an_error_at_where() -> None:
    with pytest.raises(InputError) as err:
        points({"a": [1], "where": "matrix.a > limit"})
    assert err.value.key_path == "matrix.where"
    assert "undefined variable 'limit'" in err.value.message


def test_mapping_values_are_kept_whole() -> None:
    spec = {"steps": 2, "topk": 1}
    got = points({"spec": [{}, spec], "exclude": [{"spec": {}}]})
    assert got == [{"spec": spec}]


def test_empty_after_exclude_says_why() -> None:
    with pytest.raises(InputError) as err:
        points({"a": [1, 2], "exclude": [{"a": 1}, {"a": 2}]})
    assert err.value.message.startswith("matrix expands to no cells")
    assert "2 from the axes, 2 removed by exclude" in err.value.message
    assert err.value.key_path == "matrix"


def test_axis_must_be_a_non_empty_list() -> None:
    with pytest.raises(InputError, match="must be a list"):
        points({"a": 3})
    with pytest.raises(InputError, match="has no values"):
        points({"a": []})


def test_axis_values_are_data_not_templates() -> None:
    assert points({"a": ["{{ nope }}"]}) == [{"a": "{{ nope }}"}]
