"""bench/lib/seal_cost.py: the host steps of a trial output's trip, both ways, on a real file."""

from bench.lib.seal_cost import measure


def test_each_step_of_both_ways_is_timed_and_the_output_file_is_left_behind_by_none(tmp_path):
    row = measure(1, 1, tmp_path)
    assert set(row) == {"save", "seal kept", "seal hashed", "judge kept", "judge hashed"}
    assert all(s > 0 for s in row.values()), row
    assert list(tmp_path.iterdir()) == []
