"""The spoken quiz of ``bench/voice_quiz.py``: conversations of turns, each turn
with the words a right answer contains (any one of each group), heard back by
Whisper from the reply audio.

A turn with no ``expect`` sets up the conversation and is not scored (its reply
still is spoken and timed). ``instructions`` are sent with ``session.update``
before the turn (so they apply from its reply on).
"""

from __future__ import annotations

from dataclasses import dataclass

# numbers Whisper may write either way
_NUMBERS = {"2": "two", "3": "three", "4": "four", "5": "five", "7": "seven", "8": "eight"}


@dataclass(frozen=True)
class Turn:
    say: str
    expect: tuple[frozenset[str], ...] = ()  # every group: at least one word heard
    instructions: str | None = None

    @property
    def scored(self) -> bool:
        return bool(self.expect)


def any_of(*words: str) -> frozenset[str]:
    return frozenset(words)


def q(say: str, *groups: frozenset[str] | str, instructions: str | None = None) -> Turn:
    return Turn(say, tuple(g if isinstance(g, frozenset) else any_of(g) for g in groups),
                instructions)


def num(n: str) -> frozenset[str]:
    return any_of(n, _NUMBERS.get(n, n))


# one conversation per entry (a fresh session each)
QUIZ: list[list[Turn]] = [
    # facts
    [q("What is the capital of France?", "paris")],
    [q("How many legs does a spider have?", num("8"))],
    [q("What is the capital of Japan?", "tokyo")],
    [q("What color is the sky on a clear day?", "blue")],
    [q("What is two plus two?", num("4"))],
    [q("How many days are there in a week?", num("7"))],
    [q("What do bees make?", "honey")],
    [q("What is the largest planet in our solar system?", "jupiter")],
    [q("What is frozen water called?", "ice")],
    [q("Which animal is known as the king of the jungle?", any_of("lion", "lions"))],
    [q("What is the opposite of hot?", "cold")],
    [q("How many hours are in a day?", any_of("24", "twenty"))],
    [q("What gas do plants take in from the air?", any_of("carbon", "co2"))],
    [q("Who wrote Romeo and Juliet?", "shakespeare")],
    [q("What is the capital of Italy?", "rome")],
    [q("How many sides does a triangle have?", num("3"))],
    [q("What is the boiling point of water in degrees Celsius?", any_of("100", "hundred"))],
    [q("Which planet is known as the red planet?", "mars")],
    [q("What is ten minus three?", num("7"))],
    [q("In which country are the pyramids of Giza?", "egypt")],
    [q("What is the main language spoken in Brazil?", "portuguese")],
    [q("How many minutes are in an hour?", any_of("60", "sixty"))],
    # memory over several turns
    [q("My name is Anna."), q("What is my name?", "anna")],
    [q("Remember this. The secret word is pineapple."), q("What is two plus three?"),
     q("What was the secret word?", "pineapple")],
    [q("I have a dog called Rex."), q("What is my dog's name?", "rex")],
    [q("I live in Lisbon."), q("Which city do I live in?", "lisbon")],
    [q("My favourite colour is green."), q("What is the capital of Spain?", "madrid"),
     q("What is my favourite colour?", "green")],
    # following instructions
    [q("What is the capital of Germany?", "berlin", any_of("over"),
       instructions="End every reply with the words: over and out.")],
    [q("Hello there."), q("What is the capital of Canada?", "ottawa", "captain",
                          instructions="Start every reply with the words: Aye aye captain.")],
    [q("Name a fruit that is yellow.", "banana",
       instructions="Answer with one word only.")],
    [q("What is the capital of Spain?", "madrid",
       instructions="You are a pirate. Answer like a pirate, in English.")],
    [q("How many wheels does a bicycle have?", num("2"),
       instructions="Always answer in one very short sentence.")],
]

VOICES = ("piper", "espeak")  # alternated per conversation
