"""The spoken tool quiz of ``bench/tool_quiz.py``: four tools as an agent builder
would declare them, and conversations of spoken requests, each turn with the
call it should make (or none), the tool's answer the bench gives back, and the
words a reply that used that answer contains.

Written before the quiz was first run and not changed after it: a quiz tuned
to its own misses measures its questions, not the agent. The last eight
conversations (after a tool's result was given and spoken, a new request that
needs a call again, or one no tool fits) were added on 2026-12-04 and written
before their first run, as the others were.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "get_weather",
     "description": "Get the current weather (temperature and conditions) for a city.",
     "parameters": {
         "type": "object",
         "properties": {
             "city": {"type": "string", "description": "The city name, e.g. Paris"},
             "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                      "description": "Temperature unit; only when the user asks for one"},
         },
         "required": ["city"], "additionalProperties": False}},
    {"type": "function", "name": "set_timer",
     "description": "Start a countdown timer that rings after the given number of minutes.",
     "parameters": {
         "type": "object",
         "properties": {"minutes": {"type": "integer", "minimum": 1, "maximum": 1440,
                                    "description": "Length of the timer in minutes"}},
         "required": ["minutes"], "additionalProperties": False}},
    {"type": "function", "name": "lookup_flight",
     "description": "Look up the live status of a flight: on time or delayed, departure "
                    "time and gate.",
     "parameters": {
         "type": "object",
         "properties": {"flight_number": {
             "type": "string",
             "description": "Airline code and number, e.g. BA117"}},
         "required": ["flight_number"], "additionalProperties": False}},
    {"type": "function", "name": "play_music",
     "description": "Play music on the user's speaker, by artist, by genre, or both.",
     "parameters": {
         "type": "object",
         "properties": {
             "artist": {"type": "string", "description": "The artist or band"},
             "genre": {"type": "string",
                       "enum": ["jazz", "rock", "pop", "classical", "hip hop", "country"]},
         },
         "additionalProperties": False}},
]


@dataclass(frozen=True)
class Ask:
    say: str
    tool: str | None = None  # the call it should make; None: no call
    args: dict[str, Any] = field(default_factory=dict)  # the values it must carry
    result: dict[str, Any] | None = None  # the tool's answer the bench gives back
    uses: tuple[frozenset[str], ...] = ()  # a reply that used it: a word of each group

    @property
    def kind(self) -> str:
        return "tool" if self.tool else "no tool"


def words(*w: str) -> frozenset[str]:
    return frozenset(w)


def weather(say: str, city: str, unit: str | None = None) -> Ask:
    args = {"city": city} | ({"unit": unit} if unit else {})
    temp, word = (88, "eighty") if unit == "fahrenheit" else (31, "thirty")
    return Ask(say, "get_weather", args,
               {"city": city, "temperature": temp, "unit": unit or "celsius",
                "conditions": "thunderstorms"},
               (words(str(temp), word, "thunderstorms", "thunderstorm", "storms", "stormy"),))


def timer(say: str, minutes: int) -> Ask:
    return Ask(say, "set_timer", {"minutes": minutes},
               {"status": "started", "minutes": minutes, "rings_at": "4:45 PM"},
               (words("4:45", "445", "four", "forty", "45", "started", "set", "running"),))


def flight(say: str, number: str) -> Ask:
    return Ask(say, "lookup_flight", {"flight_number": number},
               {"flight_number": number, "status": "delayed", "departure": "7:40 PM",
                "gate": "B12"},
               (words("delayed", "delay", "late", "7:40", "740", "seven", "b12", "b", "12",
                      "twelve"),))


def music(say: str, **args: str) -> Ask:
    return Ask(say, "play_music", dict(args),
               {"now_playing": "Blue Harbour", "artist": args.get("artist", "The Lanterns")},
               (words("blue", "harbour", "harbor", "playing", "lanterns"),))


def chat(say: str) -> Ask:
    return Ask(say)


# one conversation per entry (a fresh session each); a tool turn is answered
# with its result and a response.create, and that reply is scored as a follow-up
CONVERSATIONS: list[list[Ask]] = [
    [weather("What's the weather like in Paris right now?", "paris")],
    [weather("Is it going to rain in London today?", "london"), chat("Thanks, that's all.")],
    [weather("How hot is it in Phoenix, in Fahrenheit?", "phoenix", "fahrenheit")],
    [weather("Tell me the temperature in Tokyo in Celsius.", "tokyo", "celsius")],
    [weather("Do I need a jacket in Berlin this evening?", "berlin")],
    [timer("Set a timer for ten minutes.", 10)],
    [timer("Can you time twenty five minutes for my pizza?", 25)],
    [timer("Remind me in three minutes that the tea is ready.", 3), chat("Thank you!")],
    [timer("Start a timer for an hour and a half.", 90)],
    [timer("Count down five minutes for me, please.", 5)],
    [flight("Can you check flight BA 117 for me?", "BA117")],
    [flight("Is flight UA 902 on time?", "UA902"), chat("Great, thanks a lot.")],
    [flight("Where is Lufthansa flight LH 400 right now?", "LH400")],
    [flight("Look up flight AF 22, please.", "AF22")],
    [flight("Has Delta flight DL 15 landed yet?", "DL15")],
    [music("Play some jazz.", genre="jazz")],
    [music("Put on something by Taylor Swift.", artist="taylor swift")],
    [music("I'd like to hear some classical music.", genre="classical"), chat("Perfect, thanks.")],
    [music("Play rock music by Queen.", artist="queen", genre="rock")],
    [music("Can you play Miles Davis?", artist="miles davis")],
    # requests no tool fits, some near a tool's subject
    [chat("What is the capital of Spain?")],
    [chat("How are you doing today?")],
    [chat("Tell me a short joke.")],
    [chat("Who wrote Hamlet?")],
    [chat("What does a thermometer measure?")],
    [chat("How many minutes are in an hour?")],
    [chat("What instrument did Louis Armstrong play?")],
    [chat("Why do airplanes have wings?")],
    [chat("Good morning! What's your name?")],
    [chat("Thank you so much, goodbye.")],
    # after a tool's result was given and spoken: a new request that needs a call
    # again (the same tool with other values, or another tool), or one no tool fits
    [flight("Is flight KL 1001 on time?", "KL1001"), flight("And flight UA 902?", "UA902")],
    [weather("What's the weather in Madrid?", "madrid"), weather("How about Oslo?", "oslo")],
    [weather("What's the weather like in Rome?", "rome"),
     timer("Okay, set a timer for fifteen minutes.", 15)],
    [timer("Set a timer for twenty minutes.", 20),
     music("While I wait, play some pop music.", genre="pop")],
    [music("Play something by Adele.", artist="adele"),
     flight("Now check flight AA 100, please.", "AA100")],
    [flight("Check flight DL 88 for me.", "DL88"),
     chat("What can I do at the airport while I wait?")],
    [weather("What's the weather in Miami?", "miami"), chat("Should I take an umbrella, then?")],
    [timer("Set a timer for eight minutes.", 8), chat("What's a good tea for the evening?")],
]

# espeak-ng voice (variant) and words a minute; piper's joe is the reply voice
# and the old quiz's, so it is only a comparison, never the figure
VOICES: tuple[tuple[str, int], ...] = (
    ("en-us", 175), ("en-gb", 150), ("en-us+f3", 190), ("en-gb-scotland+m3", 160),
    ("en-029", 170), ("en-gb-x-rp+f2", 140), ("piper", 0),
)
