from localspec.engine.stopping import StopStrings


def feed_all(stopper, pieces):
    shown, stopped = [], False
    for piece in pieces:
        text, stopped = stopper.feed(piece)
        shown.append(text)
        if stopped:
            break
    if not stopped:
        shown.append(stopper.flush())
    return "".join(shown), stopped


def test_stop_string_split_across_pieces_is_never_shown():
    assert feed_all(StopStrings(["</end>"]), ["hello </", "en", "d> more"]) == ("hello ", True)


def test_partial_match_that_turns_out_not_to_be_a_stop_is_released():
    assert feed_all(StopStrings(["</end>"]), ["a </e", "x b"]) == ("a </ex b", False)


def test_earliest_of_several_stops_wins():
    assert feed_all(StopStrings(["ZZ", "Q"]), ["abQcdZZ"]) == ("ab", True)


def test_no_stops_passes_everything():
    assert feed_all(StopStrings(), ["a", "b"]) == ("ab", False)
