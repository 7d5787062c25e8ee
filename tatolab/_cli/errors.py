"""A runtime refusal in the CLI's words; the renderer is tatolab/_control/words.py, which the
runtime's own terminal log shares."""

from tatolab._control.words import command, fixes_in_turn, from_answer, reason_words, render

__all__ = ["command", "fixes_in_turn", "from_answer", "reason_words", "render"]
