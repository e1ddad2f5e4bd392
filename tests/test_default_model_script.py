"""The data split and LR schedule of scripts/train_default_model.py (pure Python parts;
the training itself is run by hand, see docs/default-model.md)."""
import argparse
import importlib.util
import os

_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "train_default_model", os.path.join(_root, "scripts", "train_default_model.py"))
tdm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tdm)


def _book(n_chapters):
    lines = ["TITLE", ""]
    for c in range(1, n_chapters + 1):
        lines += [f"Chapter {c}", "", f"First line of c{c}", f"wrapped rest of c{c}.", "",
                  f"Second paragraph of c{c}.", "", ""]
    return "\n".join(lines) + "\n"


def test_paragraphs_join_wrapped_lines():
    assert tdm.paragraphs("a\nb\n\n\nc\n  d  \n\ne") == ["a b", "c d", "e"]


def test_heldout_chapter_is_removed_from_training_text():
    books = {"A": _book(3), "B": _book(12)}
    train, held = tdm.split_heldout(books, "B:11")
    assert held == ("Chapter 11\nFirst line of c11 wrapped rest of c11.\n"
                    "Second paragraph of c11.\n")
    assert "c11" not in train["B"]
    assert "c1 " in train["B"] and "c10." in train["B"] and "c12." in train["B"]
    assert "c11" not in train["A"]  # A has only 3 chapters
    assert train["A"] == "\n".join(tdm.paragraphs(books["A"])) + "\n"
    # the last chapter runs to the end of the book
    _, last = tdm.split_heldout(books, "A:3")
    assert last.startswith("Chapter 3\n") and last.endswith("Second paragraph of c3.\n")


def test_lr_schedule_warms_up_then_decays_to_min():
    a = argparse.Namespace(lr=1e-3, min_lr=1e-4, warmup=0.1)
    fr = [i / 1000 for i in range(1001)]
    lr = [tdm.lr_at(f, a) for f in fr]
    assert lr[0] < 0.02 * a.lr
    assert abs(tdm.lr_at(0.1, a) - a.lr) < 1e-12
    assert abs(lr[-1] - a.min_lr) < 1e-12
    assert all(x <= y + 1e-15 for x, y in zip(lr[:100], lr[1:101]))   # rising
    assert all(x >= y - 1e-15 for x, y in zip(lr[100:], lr[101:]))    # falling
    assert abs(tdm.lr_at(0.55, a) - (a.min_lr + a.lr) / 2) < 1e-9     # cosine midpoint
