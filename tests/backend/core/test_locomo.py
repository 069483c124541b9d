"""How a LoCoMo import writes its memories: the session's day, never its clock time."""

from __future__ import annotations

import pytest

from backend.core.locomo import observation_text, parse_locomo, session_day


@pytest.mark.parametrize(
    ("stamp", "day"),
    [
        ("1:56 pm on 8 May, 2023", "8 May 2023"),
        ("10:37 am on 27 June, 2023", "27 June 2023"),
        ("11:01 AM on 17 December, 2022", "17 December 2022"),
        ("7:31 p.m. on 21 January 2022", "21 January 2022"),
        ("2023-05-08", "2023-05-08"),  # another form: kept as it is
        ("  ", ""),
    ],
)
def test_a_session_stamp_is_read_as_its_day(stamp: str, day: str) -> None:
    assert session_day(stamp) == day


def test_an_observation_starts_with_its_sessions_day() -> None:
    assert observation_text("Caroline adopted Bolt.", "1:56 pm on 8 May, 2023") == (
        "On 8 May 2023, Caroline adopted Bolt."
    )
    assert observation_text("Caroline adopted Bolt.", "") == "Caroline adopted Bolt."


def test_the_import_writes_each_observation_with_its_own_sessions_day() -> None:
    parsed = parse_locomo(
        {
            "sample_id": "s",
            "conversation": {
                "speaker_a": "Caroline",
                "speaker_b": "Melanie",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [{"speaker": "Caroline", "dia_id": "D1:1", "text": "Hi"}],
                "session_1_observation": {"Caroline": [["Caroline adopted Bolt.", "D1:1"]]},
                "session_2_date_time": "9:00 am on 3 July, 2023",
                "session_2": [{"speaker": "Melanie", "dia_id": "D2:1", "text": "Hello"}],
                "session_2_observation": {"Melanie": [["Melanie ran a race.", "D2:1"]]},
            },
        }
    )
    assert [(o.text, o.ref) for o in parsed.observations] == [
        ("On 8 May 2023, Caroline adopted Bolt.", "D1:1"),
        ("On 3 July 2023, Melanie ran a race.", "D2:1"),
    ]
    assert parsed.turns[0].spoken_at == "1:56 pm on 8 May, 2023"  # the turn keeps its stamp
