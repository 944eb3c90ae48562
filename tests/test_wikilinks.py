"""kernel/wikilinks.py: the one reader of Obsidian's `[[...]]` syntax."""

from kernel.wikilinks import find, visible


def test_every_form_gives_its_target_heading_label_and_embed():
    text = "See [[Note]], [[Note|the note]], [[dir/Note#Part 2|x]], ![[pic.png]], [[#Local]]."
    links = find(text)
    assert [(x.target, x.heading, x.label, x.embed) for x in links] == [
        ("Note", "", "", False),
        ("Note", "", "the note", False),
        ("dir/Note", "Part 2", "x", False),
        ("pic.png", "", "", True),
        ("", "Local", "", False),
    ]
    assert text[links[0].start : links[0].end] == "[[Note]]"


def test_visible_text_is_what_a_reader_sees():
    assert visible("[[Mobile-compatible plugins|Yes]]") == "Yes"
    assert visible("a [[dataview|Dataview]] b") == "a Dataview b"
    assert visible("[[Note#Heading]] and [[Other#^block1]]") == "Note Heading and Other block1"
    assert visible("| [[Table\\|cell]] |") == "| cell |"
    assert visible("line one\n[[x]]\nline three") == "line one\nx\nline three"


def test_what_is_not_a_link_is_left_as_written():
    assert find("[[ ]] and [[\n]] and [single]") == []
    assert visible("no links [here](x.md)") == "no links [here](x.md)"
